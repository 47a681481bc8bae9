package natsjs

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// How a handled message is settled:
//   - nil: acked, the ack carrying a pull if one is due (see flow);
//   - a failure on an attempt before the last: Nak'd with the backoff;
//   - a failure on the last attempt (the consumer's MaxDeliver), or a
//     Permanent one: final, terminated, after its dead letter was
//     published if WithDeadLetter says where (final.go);
//   - a failure once the stop cancelled the handler's ctx: caused by the
//     stop, so not an attempt: handed back (republish.go) with the queued
//     messages, once the run's pulls have ended.
//
// An attempt is a delivery, but for the copies Run publishes of a message
// to its own subject: a copy's attempts count on from those of the
// message it copies (its Natsjs-Attempts header), without the deliveries
// a stop handed back. A message on the server's last delivery is never
// Nak'd: the server would never deliver it again, and a work-queue stream
// would keep it for ever. While Run is stopping, every settling asks the
// server to confirm it.

// settle settles m, whose handler returned err; stopped says that it
// returned once the stop had cancelled its ctx.
func (r *run) settle(m *message, err error, stopped bool) {
	if err == nil {
		r.ack(m)
		return
	}
	stream, seq, delivery, _ := m.info()
	attempt := m.attemptsUsed(delivery) + 1
	permanent := isPermanent(err)
	if d, ok := snoozed(err); ok && !permanent {
		r.snooze(m, d, attempt-1, err)
		return
	}
	he := &HandlerError{Stream: stream, Sequence: seq, Delivery: attempt, Err: err}
	he.Stopped = !permanent && stopped
	he.Final = !he.Stopped && (permanent || r.lastAttempt(attempt))
	if he.Final {
		r.settleFinal(m, attempt, err, he)
		return
	}
	if he.Stopped {
		r.cut(m, he)
		return
	}
	defer r.report(he)
	defer r.flow.released(m)
	if m.hold() {
		return // the handler settled m itself, then failed
	}
	switch {
	case r.lastDelivery(delivery):
		// Only a delayed copy gets here: its wait used a delivery that
		// was no attempt, so Run's count has attempts left where the
		// server has no delivery left, and a Nak would strand it.
		r.retryLater(m, attempt, r.backoff(attempt))
	default:
		r.send(m, "nak", r.failedNak(attempt, delivery))
	}
}

// settleFinal settles m, whose handler failed for good on attempt with
// err: its dead letter published without the worker (final.go), then
// terminated; or, without a dead-letter subject, terminated. Then the
// error handler hears of he.
func (r *run) settleFinal(m *message, attempt uint64, err error, he *HandlerError) {
	if r.cfg.deadLetterJS != nil {
		if m.hold() {
			r.flow.released(m) // the handler settled m itself, then failed
			r.report(he)
			return
		}
		r.finish(m, attempt, err, he)
		return
	}
	defer r.report(he)
	defer r.flow.released(m)
	if !m.close() {
		r.send(m, "term", termBody(finalReason(err, attempt)))
	}
}

// cut hands back m, whose handler failed because the stop cancelled its
// ctx, as the stop hands back the queued messages: once the pulls the run
// sent have ended. Handed back while one is open, m could be redelivered
// straight into it, and handed back again: two deliveries for one stop,
// or a second copy.
func (r *run) cut(m *message, he *HandlerError) {
	defer r.report(he)
	if m.hold() {
		r.flow.released(m) // the handler settled m itself, then failed
		return
	}
	if r.flow.requeue(m) {
		return // in the queue, with its progress, until the stop hands it back
	}
	// The stop has handed the queue back: its pulls have ended. m is
	// running still, with its progress, until it is given back.
	r.giveBack(m)
	r.flow.released(m)
}

// lastAttempt reports whether attempt is the consumer's last.
func (r *run) lastAttempt(attempt uint64) bool {
	maxDeliver := r.maxDeliver.Load()
	return maxDeliver > 0 && attempt >= uint64(maxDeliver)
}

// lastDelivery reports whether the server will not deliver a message
// again after delivery, which a Nak would then strand.
func (r *run) lastDelivery(delivery uint64) bool {
	maxDeliver := r.maxDeliver.Load()
	return maxDeliver > 0 && delivery >= uint64(maxDeliver)
}

// ack acks m, whose handler returned nil.
func (r *run) ack(m *message) {
	if m.close() {
		r.flow.released(m) // the handler settled m itself
		return
	}
	if r.stopping.Load() {
		r.confirm(m, "ack", ackAck)
		r.flow.released(m)
		return
	}
	// lastAcked is stored before the flow counts the ack: a probe of the
	// acked slots always has a message to ack again.
	r.lastAcked.Store(m)
	if p := r.flow.carry(m, time.Now().Add(r.pullDeadline)); p.n > 0 {
		if err := r.sendCarry(m, p); err != nil {
			r.flow.ended(p.id, -1)
			r.report(m.messageError("ack", err))
			r.pullFailed(err)
		}
		return
	}
	if err := m.send(ackAck); err != nil {
		r.report(m.messageError("ack", err))
	}
	r.flow.ackedPlain(m)
}

// send sends an ack body of the run's own for m, which it closed or held:
// plainly, or, while Run is stopping, asking the server to confirm it. It
// seals m first, so that m gets its progress messages until its settling
// goes out (a copy published before it may take longer than AckWait), and
// none after it, which could undo a Nak's delay.
func (r *run) send(m *message, op string, body []byte) {
	m.seal()
	if r.stopping.Load() {
		r.confirm(m, op, body)
		return
	}
	if err := m.send(body); err != nil {
		r.report(m.messageError(op, err))
	}
}

// sendReplaced terminates m, whose copy its stream now stores, and waits,
// for up to the settle timeout, for the server to confirm it: the run's
// next pull may bring the copy, and the server must not count it held
// beside m, or the run would hold one more than WithMaxInFlight allows.
// During a stop it is send's confirmed Term; otherwise a Term the server
// does not confirm is reported and not counted (the stop's
// ErrNotConfirmed is about what the stop hands back).
func (r *run) sendReplaced(m *message, body []byte) {
	if r.stopping.Load() {
		r.send(m, "term", body)
		return
	}
	m.seal()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.settleTimeout)
	defer cancel()
	if _, err := r.nc.RequestWithContext(ctx, m.delivery().Reply, body); err != nil {
		r.report(m.messageError("term", err))
	}
}

// failedNak returns the Nak of a message whose attempt failed, on the
// server's delivery: at once if the backoff after attempt is not
// positive, else after it.
func (r *run) failedNak(attempt, delivery uint64) []byte {
	return r.nakAfter(r.backoff(attempt), delivery)
}

// backoff returns the delay after a failure on attempt: WithBackoff's, else
// the consumer's BackOff, else DefaultBackoff.
func (r *run) backoff(attempt uint64) time.Duration {
	backOff := *r.backOff.Load()
	switch {
	case r.cfg.backoff != nil:
		return r.cfg.backoff(attempt)
	case len(backOff) > 0:
		return backOff[backOffIndex(attempt, len(backOff))]
	}
	return DefaultBackoff(attempt)
}

// nakAfter returns the Nak that has the server redeliver a message d from
// now, after its delivery numbered delivery; at once if d is not
// positive. On a consumer with a BackOff, nats-server (2.15) counts a
// Nak's delay from BackOff[0] (its AckWait) back, but against the BackOff
// of the delivery, so that it redelivers BackOff[d-1] - BackOff[0] later
// than asked: nakAfter asks for that much less, which may be nothing or
// less than nothing (the server takes a negative delay off its own).
func (r *run) nakAfter(d time.Duration, delivery uint64) []byte {
	if d <= 0 {
		return ackNak
	}
	if backOff := *r.backOff.Load(); len(backOff) > 0 {
		d -= backOff[backOffIndex(delivery, len(backOff))] - backOff[0]
	}
	return nakDelayBody(d)
}

// backOffIndex returns the index in a BackOff of n values of the delay
// after delivery.
func backOffIndex(delivery uint64, n int) int {
	return int(min(max(delivery, 1)-1, uint64(n-1)))
}

// confirm sends body, m's settling, asking the server to confirm that it
// processed it, and waits for the answer up to the settle timeout. A
// settling the server did not confirm is reported and counted.
//
// A settling written to a connection that was lost before the answer came
// may have been lost with it (written to a socket the server had already
// closed): once the client has reconnected, confirm sends it again. One
// that the client buffered while it was disconnected is not sent again:
// the client sends it when it reconnects. Sending a settling twice is
// harmless but for a Nak the server had processed the first time, which
// may make another process's delivery of the message come back: a
// duplicate, which at-least-once allows, rather than a hand-back lost.
func (r *run) confirm(m *message, op string, body []byte) bool {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.settleTimeout)
	defer cancel()
	for {
		connected, reconnects := r.nc.IsConnected(), r.nc.Stats().Reconnects
		try, cancelTry := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := r.nc.RequestWithContext(try, m.delivery().Reply, body)
			done <- err
		}()
		err := r.awaitAnswer(done, connected, reconnects, cancelTry)
		cancelTry()
		switch {
		case err == nil:
			return true
		case err == errReconnected && ctx.Err() == nil:
			continue
		}
		r.unconfirmed.Add(1)
		r.report(m.messageError(op, fmt.Errorf("%w: %w", ErrNotConfirmed, err)))
		return false
	}
}

// errReconnected says that the client reconnected while a settling sent
// on the connection before waited for its answer.
var errReconnected = errors.New("natsjs: the connection was lost and restored")

// awaitAnswer waits for a request's result on done. If the request was
// sent while connected, and the client reconnects meanwhile, it cancels
// the request and returns errReconnected.
func (r *run) awaitAnswer(done <-chan error, connected bool, reconnects uint64, cancel context.CancelFunc) error {
	if !connected {
		return <-done
	}
	tick := time.NewTicker(reconnectPoll)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if r.nc.Stats().Reconnects != reconnects && r.nc.IsConnected() {
				cancel()
				<-done
				return errReconnected
			}
		}
	}
}

// reconnectPoll is how often a settling waiting for its answer checks
// whether the client reconnected.
const reconnectPoll = 20 * time.Millisecond
