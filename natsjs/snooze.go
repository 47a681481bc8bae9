package natsjs

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Snooze returns the error a handler returns to have its message handled
// again d from now, without using an attempt: the handler is not ready for
// it yet (a rate limit, a resource not there yet), and nothing failed.
// [Run] does not report it to the error handler. errors.As finds it
// through wrapping, but a [Permanent] failure wins over it. d below 0 is
// 0: as soon as possible, behind nothing.
//
// What the server allows decides what a snooze costs:
//   - In a work-queue stream whose consumer has a MaxDeliver of at least
//     2, Run publishes a delayed copy of the message to its own subject
//     (as a stop does, with the attempts used and the header
//     Natsjs-Not-Before) and terminates the message. The copy's first
//     delivery is its wait, which Run ends with a Nak of the delay left;
//     its attempts count on from the message's. It costs no attempt, but
//     a publication, a delivery and a Nak, and the copy goes to the end
//     of the stream. The per-subject limits are kept as for a stop's
//     copy (see [Run]); a copy the stream refuses falls back to a Nak
//     with the delay, which costs an attempt.
//   - Without a MaxDeliver, in any stream: a Nak with the delay, which
//     keeps the message's place; the delivery counts for nothing but
//     [DefaultBackoff], which grows a step.
//   - In another stream, where a copy would reach every consumer: a Nak
//     with the delay, which the server counts as a delivery: it uses an
//     attempt.
//   - Where the server cannot delay the message (its last delivery outside
//     a work queue, a work queue whose consumer has a MaxDeliver of 1), the
//     snooze is a final failure: dead-lettered (see [WithDeadLetter]) or
//     terminated, and reported as a [HandlerError].
//
// A snooze settles the message, even once the stop has cancelled the
// handler's ctx: it is not handed back sooner.
func Snooze(d time.Duration) error { return &snoozeError{d: max(d, 0)} }

// A snoozeError is a handler's Snooze.
type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return "natsjs: snoozed for " + e.d.String() }

// snoozed returns the delay of err, if it is or wraps a Snooze.
func snoozed(err error) (time.Duration, bool) {
	var se *snoozeError
	if errors.As(err, &se) {
		return se.d, true
	}
	return 0, false
}

// snooze settles m, whose handler returned err, a Snooze of d, having used
// spent attempts before this delivery.
func (r *run) snooze(m *message, d time.Duration, spent uint64, err error) {
	stream, seq, delivery, _ := m.info()
	maxDeliver := r.maxDeliver.Load()
	copies := r.workQueue && maxDeliver > 0
	if maxDeliver > 0 && (copies && maxDeliver == 1 || !copies && r.lastDelivery(delivery)) {
		// The server cannot delay it: as a failure on the last attempt.
		cause := fmt.Errorf("natsjs: snoozed where the server cannot delay the message (its last delivery, or MaxDeliver 1 in a work queue): %w", err)
		he := &HandlerError{Stream: stream, Sequence: seq, Delivery: spent + 1, Final: true, Err: cause}
		r.settleFinal(m, spent+1, cause, he)
		return
	}
	defer r.flow.released(m)
	if m.hold() {
		return // the handler settled m itself
	}
	if !copies || r.gone.Load() {
		r.send(m, "nak", r.nakAfter(d, delivery))
		return
	}
	cerr := r.copyLater(m, spent, time.Now().Add(d), "natsjs-snooze:")
	switch {
	case cerr == nil:
	case errors.Is(cerr, ErrSuperseded):
		r.report(m.messageError("republish", cerr))
	case r.lastDelivery(delivery):
		r.copyFailed(m, cerr)
		r.leaveLast(m, spent+1, fmt.Errorf("natsjs: snoozed on its last delivery, and no copy could take its place: %w", err), "no copy could take its place")
	default:
		// The Nak costs the message an attempt, but loses nothing.
		r.copyFailed(m, cerr)
		r.send(m, "nak", r.nakAfter(d, delivery))
	}
}

// retryLater settles m, held, a delayed copy whose attempt failed on
// the server's last delivery while Run's count has attempts left: a
// delayed copy of it, which comes back after d with spent attempts used.
// If none can be published, m is dead-lettered or left, as at a stop.
func (r *run) retryLater(m *message, spent uint64, d time.Duration) {
	if !r.workQueue || r.gone.Load() {
		r.leaveLast(m, spent, errLastDelivery, "in a stream that is not a work queue")
		return
	}
	err := r.copyLater(m, spent, time.Now().Add(d), "natsjs-retry:")
	switch {
	case err == nil:
	case errors.Is(err, ErrSuperseded):
		r.report(m.messageError("republish", err))
	default:
		r.copyFailed(m, err)
		r.leaveLast(m, spent, errLastDelivery, "no copy could take its place")
	}
}

// errLastDelivery is the dead letter's cause for a delayed copy that
// failed on the server's last delivery and could not be copied again.
var errLastDelivery = errors.New("natsjs: failed on the server's last delivery of a delayed copy, which could not be copied again")

// copyLater publishes a delayed copy of m, held, to its own subject:
// spent attempts used, its next attempt not before notBefore; and
// terminates m. The copy's Nats-Msg-Id is idPrefix and m's stream,
// sequence and time. If the stream has moved on, m is terminated without
// a copy, and the error wraps ErrSuperseded.
func (r *run) copyLater(m *message, spent uint64, notBefore time.Time, idPrefix string) error {
	stream, seq, _, ts := m.info()
	out := copyOf(m, m.msg.Subject)
	out.Header.Set("Nats-Msg-Id", idPrefix+stream+":"+strconv.FormatUint(seq, 10)+":"+strconv.FormatInt(ts, 10))
	out.Header.Set(hdrAttempts, strconv.FormatUint(spent, 10))
	out.Header.Set(hdrNotBefore, notBefore.UTC().Format(time.RFC3339Nano))
	ack, err := r.publishCopy(m, out)
	switch {
	case errors.Is(err, ErrSuperseded):
		r.send(m, "term", termBody("natsjs: delayed, but superseded by a newer message of its subject"))
		return err
	case err != nil:
		return err
	}
	r.sendReplaced(m, termBody(fmt.Sprintf("natsjs: delayed until %s: re-published as %s/%d", notBefore.UTC().Format(time.RFC3339Nano), ack.Stream, ack.Sequence)))
	return nil
}

// wait settles m if it is a delayed copy on its first delivery, its wait:
// a Nak of the delay left, and reports whether it did. On the server's
// last delivery (a MaxDeliver lowered to 1), where a Nak would strand it,
// the wait is cut short: its handler runs.
func (r *run) wait(m *message) bool {
	nb, ok := m.notBefore()
	if !ok {
		return false
	}
	if _, _, delivery, _ := m.info(); delivery != 1 || r.lastDelivery(1) {
		return false
	}
	if !m.close() {
		r.send(m, "nak", r.nakAfter(time.Until(nb), 1))
	}
	r.flow.released(m)
	return true
}
