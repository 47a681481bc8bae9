package natsjs

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The acks of handled messages are confirmed in batches, off the workers, by
// one goroutine, the acker: it acks every message of a batch with a plain
// Ack but the last, which it acks with DoubleAck, a request the server
// answers once it has processed that ack. The answer confirms the whole
// batch, because the server processes the acks that one connection sends
// for one consumer in the order they were sent: the connection's read loop
// queues them for the consumer as it reads them, and a single goroutine of
// the consumer takes them from that queue in order and answers a DoubleAck
// after processing it. So a message keeps its slot until the server has
// processed its ack, as when each message had its own DoubleAck, at one
// round trip per batch instead of one per message.
//
// A batch is whatever was handled while the previous one was being
// confirmed, once it counts ackAt messages: under load, batches grow until
// one round trip confirms every message a pool handles meanwhile. A batch
// does not wait for ackAt messages when no message waits for a worker (the
// slots are needed), when the watcher polls, or once the stop has begun.

// queueAck hands m, whose handler returned nil, to the acker. Its stay, and
// its count in running, end once the acker has confirmed its ack.
func (r *run) queueAck(m *message) {
	r.ackMu.Lock()
	r.toAck = append(r.toAck, m)
	due := len(r.toAck) >= r.ackAt
	r.ackMu.Unlock()
	if due || r.waiting.Load() == 0 {
		r.wakeAcker()
	}
}

// ackNow has the acker ack and confirm every queued message, however few.
func (r *run) ackNow() {
	r.ackMu.Lock()
	r.ackAll = len(r.toAck) > 0
	r.ackMu.Unlock()
	r.wakeAcker()
}

// starving tells the puller and the acker that no message waits for a
// worker any more: they stop waiting for batches.
func (r *run) starving() {
	select {
	case r.pullNow <- struct{}{}:
	default: // the puller is already due to look
	}
	r.wakeAcker()
}

func (r *run) wakeAcker() {
	select {
	case r.ackWake <- struct{}{}:
	default: // the acker is already due to look
	}
}

// ackLoop is the acker: it acks and confirms the queued messages, a batch at
// a time, until exit is closed. Only the stop closes exit, once running
// says that every handled message was confirmed.
func (r *run) ackLoop(exit <-chan struct{}) {
	var batch []*message // reused: it and toAck swap arrays
	for {
		select {
		case <-r.ackWake:
		case <-exit:
			return
		}
		r.ackMu.Lock()
		if r.ackAll || len(r.toAck) >= r.ackAt || r.waiting.Load() == 0 {
			batch, r.toAck = r.toAck, batch
			r.ackAll = false
		}
		r.ackMu.Unlock()
		if len(batch) > 0 {
			r.ackBatch(batch)
			clear(batch) // let the settled messages go
			batch = batch[:0]
		}
	}
}

// ackBatch acks every message in batch, waits for the server to confirm
// the acks, and ends the messages' stay. A message whose handler settled
// it itself gets no ack of ours, but its settling, sent before the handler
// returned, is confirmed as the others are, unless no message of the batch
// is left for the DoubleAck; then the batch ends without a confirmation. A
// failed confirmation is left to AckWait: the server redelivers what it
// did not get.
func (r *run) ackBatch(batch []*message) {
	last := -1 // the message to DoubleAck: the last one not yet settled
	for i := len(batch) - 1; i >= 0; i-- {
		if !batch[i].settled.Load() {
			last = i
			break
		}
	}
	for _, m := range batch[:max(last, 0)] {
		if !m.settled.Load() {
			_ = m.Msg.Ack()
		}
	}
	if last >= 0 {
		// Acking goes on after a stop: it is how a stop finishes.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), settleTimeout)
		_ = batch[last].Msg.DoubleAck(ctx)
		cancel()
	}
	r.mu.Lock()
	for _, m := range batch {
		delete(r.held, m)
	}
	r.mu.Unlock()
	r.releaseSlots(len(batch))
	r.running.Add(-len(batch))
}

// The methods that settle a message, as the handler sees it: each records
// that the handler settled the message, so that the acker does not ack it.

// Ack acks m; see [jetstream.Msg].
func (m *message) Ack() error { return m.settledBy(m.Msg.Ack()) }

// DoubleAck acks m and waits for the server to confirm; see [jetstream.Msg].
func (m *message) DoubleAck(ctx context.Context) error {
	return m.settledBy(m.Msg.DoubleAck(ctx))
}

// Nak asks the server to redeliver m; see [jetstream.Msg].
func (m *message) Nak() error { return m.settledBy(m.Msg.Nak()) }

// NakWithDelay asks the server to redeliver m after delay; see
// [jetstream.Msg].
func (m *message) NakWithDelay(delay time.Duration) error {
	return m.settledBy(m.Msg.NakWithDelay(delay))
}

// Term tells the server never to redeliver m; see [jetstream.Msg].
func (m *message) Term() error { return m.settledBy(m.Msg.Term()) }

// TermWithReason is Term with a reason; see [jetstream.Msg].
func (m *message) TermWithReason(reason string) error {
	return m.settledBy(m.Msg.TermWithReason(reason))
}

// settledBy records that the handler settled m, if err says it did, and
// returns err.
func (m *message) settledBy(err error) error {
	if err == nil {
		m.settled.Store(true)
	}
	return err
}

// The handler gets a *message as its jetstream.Msg.
var _ jetstream.Msg = (*message)(nil)
