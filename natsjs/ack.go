package natsjs

import (
	"fmt"
	"time"
)

// A handled message is acked on the worker that ran its handler, at once,
// with a plain Ack; its slot is then acked (see slotBook), free for a pull
// that travels as a later ack. When enough slots are to be had (pullAt
// while messages wait for the workers, else one), the ack itself carries
// the next pull (+NXT): the server registers that pull only after it has
// processed the ack, and it processes the acks that one connection sends
// to one consumer in the order they were sent (its read loop queues them
// for the consumer as it reads them, and one goroutine of the consumer
// takes them in order). So the server can serve the pull only once it
// knows of every ack sent before: what it counts as delivered to this
// process and not acked stays within the bound, even if it were to read
// some acks and lose them, and no slot waits for a round trip.
//
// Acked slots that no ack carried away (too few of them for a pull, or
// the workers went idle) go into a pull the puller sends as an ack again
// of the last message the run acked (see pullLoop). When the run stops,
// they go into a probe instead: that ack again asks for an answer, and the
// slots wait for it; a stop waits for its probes. So when Run returns, the
// server has confirmed that it processed every ack the run sent, or the
// error handler was told it did not (ErrNotConfirmed).

// ackHandled acks m, whose handler returned nil, and ends its stay.
func (r *run) ackHandled(m *message) {
	defer r.running.Done()
	r.mu.Lock()
	delete(r.held, m)
	r.mu.Unlock()
	if m.close() {
		// The handler settled m itself, before it returned: its settling
		// went before any later ack, as an ack of the run's would. Before
		// the run acked anything itself, no ack can carry its slot: it is
		// free at once, unconfirmed.
		if r.lastAcked.Load() == nil {
			r.slots.releaseHeld(1)
		} else {
			r.slots.ackSent()
		}
		return
	}
	if r.ctx.Err() == nil {
		want := 1
		if r.waiting.Load() > 0 {
			want = r.pullAt
		}
		if id, n := r.slots.carryAck(r.maxBatch, want, time.Now().Add(r.pullDeadline())); n > 0 {
			body := append([]byte("+NXT "), r.pullBody(nil, n)...)
			if err := r.nc.PublishRequest(m.msg.Reply, r.pullReply(id), body); err != nil {
				r.slots.ended(id, -1)
				r.report(m.messageError("ack", err))
				r.pullFailed(err)
			}
			r.lastAcked.Store(m)
			return
		}
	}
	r.send(m, ackAck, "ack")
	r.lastAcked.Store(m)
	r.slots.ackSent()
}

// probeAcked sends the acked slots' probe, at the end of a stop.
func (r *run) probeAcked() {
	last := r.lastAcked.Load()
	if last == nil {
		r.slots.freeAcked()
		return
	}
	if id, _ := r.slots.probeAcked(time.Now().Add(settleTimeout)); id != 0 {
		r.sendProbe(last, id)
	}
}

// sendProbe acks m, which the run acked already, asking the server to
// answer probe id once it has processed the ack, and so every ack the
// connection sent to the consumer before.
func (r *run) sendProbe(m *message, id uint64) {
	if err := r.nc.PublishRequest(m.msg.Reply, r.probeReply(id), ackAck); err != nil {
		r.probeFailed(id, fmt.Errorf("%w: %w", ErrNotConfirmed, err))
	}
}

// probeFailed frees the slots of probe id, which failed with err, and
// tells the error handler which acks were not confirmed.
func (r *run) probeFailed(id uint64, err error) {
	if p, ok := r.slots.endProbe(id); ok {
		r.reportProbe(p, err)
	}
}

// reportProbe tells the error handler of the acks probe p did not confirm.
func (r *run) reportProbe(p probeRecord, err error) {
	r.report(fmt.Errorf("natsjs: Run: consumer %q: the server did not confirm the acks of %d messages (the last acked: %v): %w",
		r.name, p.n, r.lastAckedError(), err))
}

// lastAckedError names the last message the run acked, for an error.
func (r *run) lastAckedError() string {
	m := r.lastAcked.Load()
	if m == nil {
		return "none"
	}
	stream, seq := m.sequence()
	return fmt.Sprintf("%s/%d", stream, seq)
}
