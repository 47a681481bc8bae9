package natsjs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A path is how a run talks to the server: how it asks for messages, and
// how the last ack of a batch frees the batch's slots. Run takes one of
// two. rawPath, when [WithJetStream] gives it the connection, sends raw
// pull requests on one subscription of its own, several at once, and
// carries a pull in an ack (raw.go). fetchPath, without it, pulls with the
// consumer's own Fetch, and frees a batch's slots once the server confirms
// its last ack (fetch.go). The rest of the run, the slot book, the hand-off
// to the pool, progress, settling and the stop, does not know which runs.
type path interface {
	// pull asks the server for n messages, in the slots that pull id of
	// the slot book took, and returns without waiting for them. Each
	// message goes to run.deliver; the pull ends with slots.ended, or, if
	// the path gives its pulls a deadline (run.pullDeadline), when the
	// watcher gives up on it.
	pull(id uint64, n int) error
	// carry sends m's ack carrying pull id of n messages, which the
	// server registers only once it has processed the ack. Only called
	// if run.canCarry.
	carry(m *message, id uint64, n int) error
	// confirm acks m, or, on the raw path, acks it again, asking the
	// server to say when it has processed that ack, and so every ack
	// the connection sent to the consumer before: probe id of the slot
	// book ends when it does (slots.endProbe), or fails (probeFailed).
	confirm(m *message, id uint64)
	// closed reports whether the connection was closed for good, so that
	// no pull the path sent can end or bring anything: then the run gives
	// them up. The fetch path, whose pulls end by themselves, says false.
	closed() bool
	// close ends the path once nothing is owed and no probe is out: it
	// unsubscribes, and waits for the goroutines it started.
	close()
}

// pullLoop is the puller: it sends a plain pull whenever free slots are
// available, until r.ctx is done. While messages wait for the workers it
// waits for pullAt free slots, to send fewer, larger pulls.
func (r *run) pullLoop() {
	for {
		if r.ctx.Err() != nil {
			return
		}
		if d := time.Until(time.Unix(0, r.pauseUntil.Load())); d > 0 {
			select {
			case <-time.After(d):
			case <-r.ctx.Done():
				return
			}
		}
		want := 1
		if r.waiting.Load() > 0 {
			want = r.pullAt
		}
		var deadline time.Time // zero: the path ends its pulls itself
		if r.pullDeadline > 0 {
			deadline = time.Now().Add(r.pullDeadline)
		}
		id, n := r.slots.takeForPull(r.maxBatch, want, deadline)
		if n == 0 {
			select {
			case <-r.slots.changed:
			case <-r.pullNow:
			case <-r.ctx.Done():
				return
			}
			continue
		}
		if err := r.path.pull(id, n); err != nil {
			r.slots.ended(id, -1)
			r.pullFailed(fmt.Errorf("sending a pull: %w", err))
		}
	}
}

// pullFailed reports a failed pull and pauses the puller: for longer each
// time, until a message arrives. A closed connection ends the run.
func (r *run) pullFailed(err error) {
	if errors.Is(err, nats.ErrConnectionClosed) {
		r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
		return
	}
	r.report(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
	pause := min(max(2*time.Duration(r.pause.Load()), 50*time.Millisecond), 2*time.Second)
	r.pause.Store(int64(pause))
	r.pauseUntil.Store(time.Now().Add(pause).UnixNano())
}

// consumerDeleted ends the run: the server said the consumer is gone.
func (r *run) consumerDeleted() {
	r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, jetstream.ErrConsumerDeleted))
}

// pullRefused ends the run: the server refused a pull, why, as it would
// refuse every later one.
func (r *run) pullRefused(why string) {
	r.end(fmt.Errorf("natsjs: Run: consumer %q: %s: %w", r.name, why, ErrPullRefused))
}

// deliver takes charge of a message a pull brought, in a slot it owed.
func (r *run) deliver(w jetstream.Msg) {
	if r.pause.Load() != 0 {
		r.pause.Store(0)
	}
	m := &message{wire: w}
	if !r.slots.delivered() {
		// A message for a pull given up on, with every slot taken: it
		// goes back to the server at once.
		r.sent(m, "nak", w.Nak())
		return
	}
	m.task = func() { r.runTask(m) }
	r.register(m)
}

// checkConsumer asks the server, in the background, whether the consumer
// still exists, and ends the run if it does not. One check at a time.
func (r *run) checkConsumer() {
	if !r.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.checking.Store(false)
		r.refresh()
	}()
}

// refresh reads the consumer's configuration again, so that a change of
// its AckWait, BackOff or MaxDeliver takes effect, and ends the run if the
// consumer or its stream is gone.
func (r *run) refresh() {
	ctx, cancel := context.WithTimeout(r.ctx, settleTimeout)
	defer cancel()
	info, err := r.cons.Info(ctx)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
	case err != nil:
		if r.ctx.Err() == nil {
			r.report(fmt.Errorf("natsjs: Run: reading consumer %q: %w", r.name, err))
		}
	default:
		r.maxDeliver.Store(int64(info.Config.MaxDeliver))
		if r.cfg.progress == 0 {
			r.progressEvery.Store(int64(redeliveryFloor(info.Config) / 3))
		}
	}
}
