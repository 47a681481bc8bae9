package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A fetchPath pulls with the consumer's own Fetch, for a run that has no
// connection of its own to pull on (no [WithJetStream]). Each pull is a
// Fetch in a goroutine of its own, which delivers the messages as they
// come and ends the pull when jetstream closes the batch: at the server's
// status, or a second after the pull's expiry. Several may be out at
// once. jetstream gives each its own subscription, so the pull knows what
// it brought, and the path needs no deadline of its own.
//
// An ack cannot carry a pull here: Fetch sends its pulls as requests of
// its own, which the server queues apart from the acks, and may serve
// before it has processed an ack sent earlier. So a batch's slots are
// freed only once the server confirms its last ack (a DoubleAck), and so
// every earlier ack of the connection to the consumer: a process whose
// acks the server read and lost would otherwise go on being served. That
// costs each slot a round trip, which the raw path saves.
type fetchPath struct {
	r    *run
	cons jetstream.Consumer
	wg   sync.WaitGroup // the goroutines of the fetches and confirmations
}

func (f *fetchPath) pull(id uint64, n int) error {
	f.wg.Go(func() { f.fetch(id, n) })
	return nil
}

// fetch is pull id's goroutine.
func (f *fetchPath) fetch(id uint64, n int) {
	r := f.r
	batch, err := f.cons.Fetch(n, jetstream.FetchMaxWait(r.pullExpires))
	if err != nil {
		r.slots.ended(id, -1)
		r.pullFailed(fmt.Errorf("pull: %w", err))
		return
	}
	// The batch's channel has room for the whole batch, and is closed
	// when the pull ends, so reading it to the end leaves no message sent
	// to a pull nobody reads.
	got := 0
	for msg := range batch.Messages() {
		got++
		r.deliver(msg)
	}
	r.slots.ended(id, n-got)
	err = batch.Error()
	lower := ""
	if err != nil {
		lower = strings.ToLower(err.Error())
	}
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrConsumerDeleted):
		r.consumerDeleted()
	case errors.Is(err, jetstream.ErrBadRequest),
		strings.Contains(lower, "exceeded maxrequest"), strings.Contains(lower, "push based"):
		// The next pull would be refused alike.
		r.pullRefused(err.Error())
	case errors.Is(err, nats.ErrNoResponders):
		// The consumer or its stream may be gone.
		r.pullFailed(fmt.Errorf("pull: %w", err))
		r.checkConsumer()
	default:
		// Exceeded MaxWaiting, leadership change, server shutdown, ...:
		// worth another pull, after a pause.
		r.pullFailed(fmt.Errorf("pull: %w", err))
	}
}

func (f *fetchPath) carry(*message, uint64, int) error {
	panic("natsjs: an ack cannot carry a Fetch") // run.canCarry is false
}

func (f *fetchPath) confirm(m *message, id uint64) {
	f.wg.Go(func() {
		// Confirming goes on after a stop: it is how a stop finishes.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(f.r.ctx), settleTimeout)
		defer cancel()
		if err := m.wire.DoubleAck(ctx); err != nil {
			f.r.probeFailed(id, fmt.Errorf("%w: %w", ErrNotConfirmed, err))
			return
		}
		f.r.slots.endProbe(id)
	})
}

func (f *fetchPath) closed() bool { return false }

func (f *fetchPath) close() { f.wg.Wait() }
