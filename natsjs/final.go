package natsjs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dispatchkit/workerpool"
)

// A final failure (on the last attempt, or Permanent) with a dead-letter
// subject: Run publishes the dead letter without the worker, which goes on
// to the next message, while the message stays held, with its progress,
// so that the server does not redeliver it meanwhile. The publication is
// tried for the dead-letter timeout. Once the dead letter is published,
// the message is terminated. Its progress goes on until the term goes out,
// through every publication before it (the dead letter's, the copy's).
//
// If it cannot be published, the message must neither be lost nor be
// handled again. In a work-queue stream, Run publishes a copy of it to its
// own subject, with a Natsjs-Final-Error header, and terminates it: the
// stream keeps the copy, and a Run that gets it does not run its handler
// but tries the dead letter again (finishCopy), and, failing, Naks it with
// the backoff; on the server's last delivery of the copy, it copies it
// again. So the message reaches the dead-letter subject once a stream
// captures it. Outside a work queue, where a copy would reach every
// consumer, the message is left unsettled: the server redelivers it after
// AckWait, but on its last delivery.

// finish settles m, held, whose handler failed for good on attempt with
// cause, in a goroutine of its own, and then tells the error handler of
// he.
func (r *run) finish(m *message, attempt uint64, cause error, he *HandlerError) {
	r.flow.hold(m)
	r.async(func() {
		defer r.report(he)
		defer r.flow.unhold(m)
		if err := r.deadLetter(m, attempt, cause); err != nil {
			r.report(m.messageError("dead-letter", err))
			r.keepFinal(m, attempt, cause)
			return
		}
		r.send(m, "term", termBody(finalReason(cause, attempt)))
	})
}

// finishCopy settles m, a copy whose handler failed for good before (see
// keepFinal), without running the handler: as a final failure with the
// cause it carries. If the dead letter cannot be published yet, m is
// Nak'd with the backoff of its delivery, to be tried again then, or, on
// the server's last delivery, copied again.
func (r *run) finishCopy(m *message, cause string) {
	_, _, delivery, _ := m.info()
	attempts := m.attemptsBefore()
	if r.cfg.deadLetterJS == nil {
		// As any final failure without a dead-letter subject.
		m.close()
		r.send(m, "term", termBody(finalReason(keptFailure(cause), attempts)))
		r.flow.released(m)
		return
	}
	m.hold()
	r.flow.hold(m)
	r.async(func() {
		defer r.flow.unhold(m)
		err := r.deadLetter(m, attempts, keptFailure(cause))
		switch {
		case err == nil:
			r.send(m, "term", termBody(finalReason(keptFailure(cause), attempts)))
			return
		case r.lastDelivery(delivery):
			r.report(m.messageError("dead-letter", err))
			r.keepFinal(m, attempts, keptFailure(cause))
		default:
			r.report(m.messageError("dead-letter", err))
			r.send(m, "nak", r.failedNak(delivery, delivery))
		}
	})
}

// keepFinal settles m, held, whose handler failed for good on attempt with
// cause and whose dead letter could not be published: in a work-queue
// stream, by a copy that says so and its termination; elsewhere, by
// leaving it unsettled. m keeps its progress messages until the term (see
// run.send): the copy may take longer than AckWait to be stored, and the
// server must not deliver m again meanwhile, to this run or another.
func (r *run) keepFinal(m *message, attempt uint64, cause error) {
	if !r.workQueue || r.gone.Load() {
		m.seal() // left: the server delivers it again after AckWait
		return
	}
	stream, seq, _, ts := m.info()
	out := copyOf(m, m.msg.Subject)
	out.Header.Set("Nats-Msg-Id", "natsjs-final:"+stream+":"+strconv.FormatUint(seq, 10)+":"+strconv.FormatInt(ts, 10))
	out.Header.Set(hdrAttempts, strconv.FormatUint(attempt, 10))
	out.Header.Set(hdrFinal, headerValue(causeText(cause)))
	out.Header.Del(hdrNotBefore)
	ack, err := r.publishCopy(m, out)
	if errors.Is(err, ErrSuperseded) {
		r.report(m.messageError("republish", err))
		r.send(m, "term", termBody("natsjs: failed for good; its dead letter could not be published, and a newer message of its subject superseded it"))
		return
	}
	if err != nil {
		if r.stopping.Load() && !errors.Is(err, ErrNotConfirmed) {
			err = fmt.Errorf("%w: %w", ErrNotConfirmed, err) // left unsettled by the stop
		}
		r.copyFailed(m, err)
		m.seal() // left, as outside a work queue
		return
	}
	r.sendReplaced(m, termBody(fmt.Sprintf("natsjs: failed for good; its dead letter could not be published: kept as %s/%d", ack.Stream, ack.Sequence)))
}

// deadLetter publishes a copy of m, which failed for good on attempt with
// cause, to the dead-letter subject, as WithDeadLetter says, trying for the
// dead-letter timeout.
func (r *run) deadLetter(m *message, attempt uint64, cause error) error {
	out := copyOf(m, r.cfg.deadLetterSubject)
	// A dead letter published again to its subject, as one re-drives
	// dead letters, is a message like any other.
	out.Header.Del(hdrAttempts)
	out.Header.Del(hdrFinal)
	out.Header.Del(hdrNotBefore)
	// The same id for every copy of the message: a copy kept because its
	// dead letter's answer came too late has the first one deduplicated.
	// A redriven job that fails again is another dead letter.
	id := "natsjs-dead:" + m.origin()
	if n := m.msg.Header.Get(hdrRedriven); n != "" {
		id += ":" + n
	}
	out.Header.Set("Nats-Msg-Id", id)
	if md, err := m.msg.Metadata(); err == nil {
		out.Header.Set("Natsjs-Stream", md.Stream)
		out.Header.Set("Natsjs-Consumer", md.Consumer)
		out.Header.Set("Natsjs-Sequence", strconv.FormatUint(md.Sequence.Stream, 10))
	}
	out.Header.Set("Natsjs-Subject", m.msg.Subject)
	out.Header.Set("Natsjs-Deliveries", strconv.FormatUint(attempt, 10))
	out.Header.Set("Natsjs-Error", headerValue(causeText(cause)))
	_, err := r.publish(r.cfg.deadLetterJS, out, r.cfg.deadLetterTimeout)
	return err
}

// A keptFailure is the final failure a copy carries (see keepFinal).
type keptFailure string

func (e keptFailure) Error() string { return string(e) }

// causeText says what a handler's failure was: for a panic, its value.
func causeText(cause error) string {
	if pe, ok := cause.(*workerpool.PanicError); ok {
		return fmt.Sprintf("natsjs: handler panicked: %v", pe.Value)
	}
	return cause.Error()
}

// finalReason is the reason of the termination of a message that failed
// for good on attempt with cause.
func finalReason(cause error, attempt uint64) string {
	if isPermanent(cause) {
		return "natsjs: failed permanently"
	}
	return fmt.Sprintf("natsjs: failed on attempt %d", attempt)
}

// headerValue makes s fit in a header value: one line, at most 1024 bytes.
func headerValue(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}
