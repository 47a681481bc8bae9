package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// How a handled message is settled:
//   - nil: acked, the ack carrying a pull if one is due (see flow);
//   - a failure on a delivery before the last: Nak'd with the backoff;
//   - a failure on the last delivery (the consumer's MaxDeliver), or a
//     Permanent one: final, dead-lettered if WithDeadLetter says where,
//     then terminated;
//   - a failure once the stop cancelled the handler's ctx: caused by the
//     stop, so not an attempt: handed back at once (see giveBack).
//
// A message on its last delivery is never Nak'd: the server would never
// deliver it again, and a work-queue stream would keep it for ever.
// While Run is stopping, every settling asks the server to confirm it.

// settle settles m, whose handler returned err.
func (r *run) settle(m *message, err error) {
	if err == nil {
		r.ack(m)
		return
	}
	stream, seq, delivery, _ := m.info()
	he := &HandlerError{Stream: stream, Sequence: seq, Delivery: delivery, Err: err}
	defer r.report(he)
	defer r.flow.released()
	if m.close() {
		return // the handler settled m itself, then failed
	}
	permanent := isPermanent(err)
	he.Stopped = !permanent && r.hctx.Err() != nil
	he.Final = !he.Stopped && (permanent || r.lastDelivery(delivery))
	switch {
	case he.Final:
		r.finish(m, delivery, err)
	case he.Stopped:
		r.giveBack(m)
	default:
		r.send(m, "nak", r.failedNak(delivery))
	}
}

// ack acks m, whose handler returned nil.
func (r *run) ack(m *message) {
	if m.close() {
		r.flow.released() // the handler settled m itself
		return
	}
	if r.stopping.Load() {
		r.confirm(m, "ack", ackAck)
		r.flow.released()
		return
	}
	// lastAcked is stored before the flow counts the ack: a probe of the
	// acked slots always has a message to ack again.
	r.lastAcked.Store(m)
	if id, n := r.flow.carry(time.Now().Add(r.pullDeadline)); n > 0 {
		if err := r.sendCarry(m, id, n); err != nil {
			r.flow.ended(id, -1)
			r.report(m.messageError("ack", err))
			r.pullFailed(err)
		}
		return
	}
	if err := m.send(ackAck); err != nil {
		r.report(m.messageError("ack", err))
	}
	r.flow.ackedPlain()
}

// send sends an ack body of the run's own for m, which it closed: plainly,
// or, while Run is stopping, asking the server to confirm it.
func (r *run) send(m *message, op string, body []byte) {
	if r.stopping.Load() {
		r.confirm(m, op, body)
		return
	}
	if err := m.send(body); err != nil {
		r.report(m.messageError(op, err))
	}
}

// lastDelivery reports whether delivery is the consumer's last.
func (r *run) lastDelivery(delivery uint64) bool {
	maxDeliver := r.maxDeliver.Load()
	return maxDeliver > 0 && delivery >= uint64(maxDeliver)
}

// finish settles m, which failed with cause for the last time: it
// dead-letters it, if WithDeadLetter says where, and terminates it. A
// dead letter that cannot be published leaves m in its stream.
func (r *run) finish(m *message, delivery uint64, cause error) {
	if r.cfg.deadLetterJS != nil {
		if err := r.deadLetter(m, delivery, cause); err != nil {
			// Keep m in its stream rather than lose it.
			r.report(m.messageError("dead-letter", err))
			return
		}
	}
	reason := fmt.Sprintf("natsjs: failed on delivery %d", delivery)
	if isPermanent(cause) {
		reason = "natsjs: failed permanently"
	}
	r.send(m, "term", termBody(reason))
}

// giveBack hands m, whose handler did not start or failed because of the
// stop, back to the server for another process: a Nak, or, on m's last
// delivery, where a Nak would strand it, a copy re-published to its own
// subject (see republish). m must be closed.
func (r *run) giveBack(m *message) {
	_, _, delivery, _ := m.info()
	if r.lastDelivery(delivery) {
		r.republish(m, delivery)
		return
	}
	r.send(m, "nak", ackNak)
}

// republish hands back m, on its last delivery, which did not fail by
// itself: in a work-queue stream, it publishes a copy to m's own subject,
// which the stream stores as a new message, with all its deliveries ahead
// of it, then terminates m. Elsewhere, where a copy would reach every
// consumer of the stream, it dead-letters m if WithDeadLetter says where,
// and else leaves it in its stream. Either way a failure is reported and
// counted unconfirmed.
func (r *run) republish(m *message, delivery uint64) {
	const why = "natsjs: the stop came on its last delivery"
	switch {
	case r.workQueue:
		stream, seq, _, ts := m.info()
		out := copyOf(m, m.msg.Subject)
		out.Header.Set("Nats-Msg-Id", "natsjs-republish:"+stream+":"+strconv.FormatUint(seq, 10)+":"+strconv.FormatInt(ts, 10))
		out.Header.Set("Natsjs-Republished-From", strconv.FormatUint(seq, 10))
		ack, err := r.publish(r.js, out, jetstream.WithExpectStream(stream))
		if err != nil {
			r.unconfirmed.Add(1)
			r.report(m.messageError("republish", fmt.Errorf("%w: %w", ErrNotConfirmed, err)))
			return
		}
		r.send(m, "term", termBody(fmt.Sprintf("natsjs: re-published as %s/%d: the stop came on its last delivery", ack.Stream, ack.Sequence)))
	case r.cfg.deadLetterJS != nil:
		if err := r.deadLetter(m, delivery, stopCause{}); err != nil {
			r.unconfirmed.Add(1)
			r.report(m.messageError("dead-letter", fmt.Errorf("%w: %w", ErrNotConfirmed, err)))
			return
		}
		r.send(m, "term", termBody(why))
	default:
		r.unconfirmed.Add(1)
		r.report(m.messageError("republish", fmt.Errorf("%w: %s, in a stream that is not a work queue, and no dead-letter subject is set: the message stays in its stream", ErrNotConfirmed, why)))
	}
}

// stopCause is the dead letter's cause for a message the stop could not
// hand back.
type stopCause struct{}

func (stopCause) Error() string { return "natsjs: the stop came on its last delivery" }

// failedNak returns the Nak of a message whose delivery failed: at once if
// the backoff is not positive, else after it. On a consumer with a
// BackOff, nats-server (2.15) counts a Nak's delay from BackOff[0] (its
// AckWait) back, but against the BackOff of the delivery, so that it
// redelivers BackOff[d-1] - BackOff[0] later than asked: failedNak asks for
// that much less, which may be nothing or less than nothing (the server
// takes a negative delay off its own).
func (r *run) failedNak(delivery uint64) []byte {
	backOff := *r.backOff.Load()
	var d time.Duration
	switch {
	case r.cfg.backoff != nil:
		d = r.cfg.backoff(delivery)
	case len(backOff) > 0:
		d = backOff[backOffIndex(delivery, len(backOff))]
	default:
		d = DefaultBackoff(delivery)
	}
	if d <= 0 {
		return ackNak
	}
	if len(backOff) > 0 {
		d -= backOff[backOffIndex(delivery, len(backOff))] - backOff[0]
	}
	return nakDelayBody(d)
}

// backOffIndex returns the index in a BackOff of n values of the delay
// after delivery.
func backOffIndex(delivery uint64, n int) int {
	return int(min(max(delivery, 1)-1, uint64(n-1)))
}

// deadLetter publishes a copy of m, which failed on delivery with cause, to
// the dead-letter subject, as WithDeadLetter says.
func (r *run) deadLetter(m *message, delivery uint64, cause error) error {
	stream, seq, _, ts := m.info()
	out := copyOf(m, r.cfg.deadLetterSubject)
	out.Header.Set("Nats-Msg-Id", "natsjs-dead:"+stream+":"+strconv.FormatUint(seq, 10)+":"+strconv.FormatInt(ts, 10))
	if md, err := m.msg.Metadata(); err == nil {
		out.Header.Set("Natsjs-Stream", md.Stream)
		out.Header.Set("Natsjs-Consumer", md.Consumer)
		out.Header.Set("Natsjs-Sequence", strconv.FormatUint(md.Sequence.Stream, 10))
	}
	out.Header.Set("Natsjs-Subject", m.msg.Subject)
	out.Header.Set("Natsjs-Deliveries", strconv.FormatUint(delivery, 10))
	out.Header.Set("Natsjs-Error", headerValue(causeText(cause)))
	_, err := r.publish(r.cfg.deadLetterJS, out)
	return err
}

// causeText says what a handler's failure was: for a panic, its value.
func causeText(cause error) string {
	if pe, ok := cause.(*workerpool.PanicError); ok {
		return fmt.Sprintf("natsjs: handler panicked: %v", pe.Value)
	}
	return cause.Error()
}

// copyOf returns a copy of m to publish to subject: its payload and
// headers, with the headers named Nats-* renamed Natsjs-Original-*. A copy
// of a copy keeps the first original's: a Natsjs-Original-* header m has
// already wins over the Nats-* header it would be renamed from.
func copyOf(m *message, subject string) *nats.Msg {
	out := nats.NewMsg(subject)
	out.Data = m.msg.Data
	for k, vs := range m.msg.Header {
		if rest, ok := strings.CutPrefix(k, "Nats-"); ok {
			k = "Natsjs-Original-" + rest
			if _, kept := m.msg.Header[k]; kept {
				continue
			}
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	return out
}

// publish publishes out with js, again while it fails, until the settle
// timeout: out carries a Nats-Msg-Id, so that a publication whose answer
// was lost and that is published again is stored once.
func (r *run) publish(js jetstream.JetStream, out *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	// Publishing goes on after a stop: it is how a stop finishes.
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.settleTimeout)
	defer cancel()
	pause := 50 * time.Millisecond
	for {
		try, cancelTry := context.WithTimeout(ctx, max(r.cfg.settleTimeout/4, time.Second))
		ack, err := js.PublishMsg(try, out, opts...)
		cancelTry()
		if err == nil {
			return ack, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
			pause = min(2*pause, time.Second)
		}
	}
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
			_, err := r.nc.RequestWithContext(try, m.msg.Reply, body)
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

// headerValue makes s fit in a header value: one line, at most 1024 bytes.
func headerValue(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}
