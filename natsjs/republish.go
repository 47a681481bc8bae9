package natsjs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// What Run hands back without having run it to the end: a message no
// handler started when the stop came (or that arrived with no slot for
// it), or whose handler failed because the stop cancelled its ctx. Such a
// delivery is not an attempt.
//
// A Nak would make the server count it all the same: the message's next
// delivery would be one closer to MaxDeliver, and a Nak on the last one
// would strand it in its stream for ever. So in a work-queue stream whose
// consumer has a MaxDeliver, Run publishes a copy of the message to its
// own subject, which the stream stores as a new message (reaching this
// consumer alone) with the attempts the message had used in a header
// (Natsjs-Attempts), then terminates the message: the copy's attempts
// count on from there. Without a MaxDeliver, deliveries are not counted
// against anything, and a Nak, which keeps the message's place at the
// head of the stream, is all it takes. In another stream, where a copy
// would reach every consumer, Run Naks, which costs a delivery; on the
// last delivery it dead-letters the message, or leaves it and says so.

// giveBack hands m, held, back to the server for another process.
func (r *run) giveBack(m *message) {
	_, _, delivery, _ := m.info()
	switch {
	case r.maxDeliver.Load() <= 0:
		r.send(m, "nak", ackNak)
	case r.workQueue && !r.gone.Load():
		err := r.republish(m, delivery)
		switch {
		case err == nil:
		case errors.Is(err, ErrSuperseded):
			r.report(m.messageError("republish", err))
		case r.lastDelivery(delivery):
			// A Nak would strand it, and no copy can take its place.
			r.copyFailed(m, err)
			r.leaveLast(m, m.attemptsUsed(delivery)+1, stopCause{}, "no copy could take its place")
		default:
			// The Nak costs the message a delivery, but loses nothing; after
			// a copy not confirmed, which may still be stored, it may cost a
			// duplicate: at least once.
			r.copyFailed(m, err)
			r.send(m, "nak", ackNak)
		}
	case r.lastDelivery(delivery):
		r.leaveLast(m, m.attemptsUsed(delivery)+1, stopCause{}, "in a stream that is not a work queue")
	default:
		r.send(m, "nak", ackNak)
	}
}

// republish publishes a copy of m, delivered delivery times, to its own
// subject, in its work-queue stream, and terminates m; if the stream has
// moved on (ErrSuperseded), it terminates m without a copy.
func (r *run) republish(m *message, delivery uint64) error {
	stream, seq, _, ts := m.info()
	spent := m.attemptsBefore() // a copy whose handler failed for good keeps its count
	if _, final := m.finalError(); !final {
		spent = m.attemptsUsed(delivery) // this delivery is no attempt
	}
	out := copyOf(m, m.msg.Subject)
	if nb, ok := m.notBefore(); ok && (delivery >= 2 || !nb.After(time.Now())) {
		// Its wait is over: the copy is an ordinary one.
		out.Header.Del(hdrNotBefore)
	}
	out.Header.Set("Nats-Msg-Id", "natsjs-republish:"+stream+":"+strconv.FormatUint(seq, 10)+":"+strconv.FormatInt(ts, 10))
	out.Header.Set(hdrAttempts, strconv.FormatUint(spent, 10))
	ack, err := r.publishCopy(m, out)
	switch {
	case errors.Is(err, ErrSuperseded):
		r.send(m, "term", termBody("natsjs: handed back, but superseded by a newer message of its subject"))
		return err
	case err != nil:
		return err
	}
	r.send(m, "term", termBody(fmt.Sprintf("natsjs: re-published as %s/%d: handed back", ack.Stream, ack.Sequence)))
	return nil
}

// publishCopy publishes out, a copy of m to m's own subject, which is to
// take m's place in its stream and no other message's.
//
// In a stream with a per-subject limit (MaxMsgsPerSubject), publishing a
// message pushes out the oldest of its subject once the subject is full:
// a copy published while a newer message of its subject is stored would
// push that one out, and the stale job would run in its place. So there
// the copy is published only while m is the last of its subject, which
// the server checks as it stores it (Nats-Expected-Last-Subject-
// Sequence): then what it pushes out, with a limit of 1, is m itself.
// With a larger limit and the subject full, it would push out an older
// message of the subject: it is not published. If m is no longer stored
// (a newer message pushed it out, or it was removed), the stream has moved
// on: the error wraps ErrSuperseded, and m needs no copy.
//
// In a stream bounded by MaxMsgs or MaxBytes that drops its oldest
// message to store a new one (DiscardOld), a copy stored while the stream
// is full pushes out the oldest message of the stream, of any subject: a
// job that may never have run. So there the copy is published only while
// the stream has room for it (see room), and only if the stream has stored
// nothing since Run looked, which the server checks as it stores it
// (Nats-Expected-Last-Sequence, the stream's last sequence when Run
// looked; messages removed meanwhile only make room). A message stored in
// between makes the server refuse the copy, and Run looks again, for the
// settle timeout. The server checks both expected sequences, the
// subject's and the stream's, on one publication, holding the stream's
// lock (nats-server's processJetStreamMsg).
//
// A stream that refuses a message over a limit (DiscardNew, for the
// stream or for the subject) refuses the copy while m is stored: the
// error says so at once, as for a full stream. Any other failure is
// retried for the settle timeout.
func (r *run) publishCopy(m *message, out *nats.Msg) (*jetstream.PubAck, error) {
	stream, seq, _, _ := m.info()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.settleTimeout)
	defer cancel()
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(stream)}
	if r.perSubject > 0 {
		if r.perSubject > 1 && !r.refusesPerSubject {
			info, err := r.stream.Info(ctx, jetstream.WithSubjectFilter(m.msg.Subject))
			if err != nil {
				return nil, fmt.Errorf("natsjs: counting the messages of subject %q: %w", m.msg.Subject, err)
			}
			if n := info.State.Subjects[m.msg.Subject]; int64(n) >= r.perSubject {
				return nil, r.superseded(ctx, m, fmt.Errorf("natsjs: subject %q holds %d messages, its limit: a copy would push out the oldest", m.msg.Subject, n))
			}
		}
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(seq))
	}
	bounded := r.maxMsgs > 0 || r.maxBytes > 0
	for {
		try := opts
		if bounded {
			last, err := r.room(ctx, m, out)
			if err != nil {
				return nil, err
			}
			try = append(slices.Clip(opts), jetstream.WithExpectLastSequence(last))
		}
		deadline, _ := ctx.Deadline()
		ack, err := r.publish(r.js, out, time.Until(deadline), try...)
		switch {
		case err == nil:
			return ack, nil
		case !answered(err):
			// No try was answered in time, and a publication held on its
			// way (a slow link, a client reconnecting) may still be
			// stored. One stored by now is the last of its subject.
			look, cancelLook := context.WithTimeout(context.Background(), max(r.cfg.settleTimeout/4, time.Second))
			_, ack, _ := r.lastOfSubject(look, m, out)
			cancelLook()
			if ack != nil {
				return ack, nil
			}
			return nil, fmt.Errorf("%w: the copy's publication was not answered, and the copy may still be stored: %w", ErrNotConfirmed, err)
		case !wrongLastSequence(err):
			return nil, err
		}
		// A message is stored that was not when Run looked: a newer one of
		// m's subject, another of the stream, or the copy itself, stored
		// by a publication whose answer was lost.
		last, ack, lerr := r.lastOfSubject(ctx, m, out)
		if ack != nil {
			return ack, nil
		}
		if bounded && ctx.Err() == nil && (r.perSubject <= 0 || lerr == nil && last.Sequence == seq) {
			continue // m is still the last of its subject: another message of the stream was stored
		}
		return nil, r.superseded(ctx, m, fmt.Errorf("natsjs: a newer message of subject %q is stored: %w", m.msg.Subject, err))
	}
}

// lastOfSubject returns the last message of m's subject and, if it is
// out, a copy of m (the same Nats-Msg-Id), out's PubAck: the copy is
// stored.
func (r *run) lastOfSubject(ctx context.Context, m *message, out *nats.Msg) (*jetstream.RawStreamMsg, *jetstream.PubAck, error) {
	last, err := r.stream.GetLastMsgForSubject(ctx, m.msg.Subject)
	if err != nil {
		return nil, nil, err
	}
	if last.Header.Get("Nats-Msg-Id") != out.Header.Get("Nats-Msg-Id") {
		return last, nil, nil
	}
	stream, _, _, _ := m.info()
	return last, &jetstream.PubAck{Stream: stream, Sequence: last.Sequence}, nil
}

// answered reports whether err, the failure of a publication, is the
// server's answer (a refusal), after which the message is not stored. Any
// other failure (a timeout, a lost connection) leaves that unknown.
func answered(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae)
}

// copyFailed reports err, the failure of m's copy, to the error handler.
// A copy whose publication was not answered (the error wraps
// ErrNotConfirmed) while the stop settles is counted among what the stop
// could not confirm, so that Run returns ErrNotConfirmed: that copy may
// still be stored, and its job run twice, as the copy and as what is done
// in its place (a Nak, a dead letter).
func (r *run) copyFailed(m *message, err error) {
	if errors.Is(err, ErrNotConfirmed) && r.stopping.Load() {
		r.unconfirmed.Add(1)
	}
	r.report(m.messageError("republish", err))
}

// room returns the last sequence of m's stream, bounded by MaxMsgs or
// MaxBytes with DiscardOld, if storing out, a copy of m, would push out
// no message but m itself; else an error saying that the stream is full.
// The copy takes m's place where the server drops m to store it: m, the
// last of its subject under a per-subject limit of 1, or the oldest
// message of the stream. Bytes are counted without that credit: the copy
// needs room beside every message stored, m included, which the size of
// m's record, not known here, would otherwise have to be trusted for.
func (r *run) room(ctx context.Context, m *message, out *nats.Msg) (uint64, error) {
	stream, seq, _, _ := m.info()
	info, err := r.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("natsjs: reading the state of stream %q: %w", stream, err)
	}
	st := info.State
	msgs := st.Msgs + 1
	if r.perSubject == 1 || st.FirstSeq == seq {
		msgs-- // what the copy pushes out is m itself
	}
	switch size := copySize(out, stream); {
	case r.maxMsgs > 0 && msgs > uint64(r.maxMsgs):
		return 0, fmt.Errorf("natsjs: stream %q is full: it holds %d messages, and MaxMsgs is %d: a copy would push out its oldest", stream, st.Msgs, r.maxMsgs)
	case r.maxBytes > 0 && st.Bytes+size > uint64(r.maxBytes):
		return 0, fmt.Errorf("natsjs: stream %q is full: it holds %d bytes, and MaxBytes is %d: a copy of %d bytes would push out its oldest", stream, st.Bytes, r.maxBytes, size)
	}
	return st.LastSeq, nil
}

// copySize is at least what a stream counts against MaxBytes for out once
// stored: the file store's record, 34 bytes beside the subject, headers
// and payload (the memory store's is 16), with the headers its
// publication adds: the expected stream and the expected last sequences,
// of up to 20 digits each.
func copySize(out *nats.Msg, stream string) uint64 {
	added := len("Nats-Expected-Stream: \r\n") + len(stream) +
		len("Nats-Expected-Last-Sequence: \r\n") + 20 +
		len("Nats-Expected-Last-Subject-Sequence: \r\n") + 20
	return uint64(34 + out.Size() + added)
}

// superseded returns an error wrapping ErrSuperseded if m's stream no
// longer holds m, and err otherwise.
func (r *run) superseded(ctx context.Context, m *message, err error) error {
	_, seq, _, _ := m.info()
	if _, gerr := r.stream.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("%w: its stream no longer holds it", ErrSuperseded)
	}
	return err
}

// wrongLastSequence reports whether err is the server's refusal of a
// publication whose expected last sequence was not the last.
func wrongLastSequence(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// refusedForGood reports whether err is a refusal that publishing the
// same message again at once cannot change: its expected last sequence
// was not the last, or the stream refuses a message over one of its
// limits (DiscardNew: "maximum messages exceeded", "maximum bytes
// exceeded", "maximum messages per subject exceeded"), or one larger than
// its MaxMsgSize.
func refusedForGood(err error) bool {
	var ae *jetstream.APIError
	if wrongLastSequence(err) {
		return true
	}
	if !errors.As(err, &ae) {
		return false
	}
	return ae.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum ||
		strings.Contains(ae.Description, "maximum messages") ||
		strings.Contains(ae.Description, "maximum bytes") ||
		strings.Contains(ae.Description, "message too large")
}

// leaveLast hands back m, closed or held, on its last delivery, where a
// Nak would strand it and no copy can be published (why says which): it
// dead-letters m, as failed on attempt with cause, if WithDeadLetter says
// where, and else leaves it in its stream. Either way a failure is
// reported and counted unconfirmed.
func (r *run) leaveLast(m *message, attempt uint64, cause error, why string) {
	if r.cfg.deadLetterJS == nil {
		m.seal()
		r.unconfirmed.Add(1)
		r.report(m.messageError("republish", fmt.Errorf("%w: %v, %s, and no dead-letter subject is set: the message stays in its stream", ErrNotConfirmed, cause, why)))
		return
	}
	if err := r.deadLetter(m, attempt, cause); err != nil {
		m.seal()
		r.unconfirmed.Add(1)
		r.report(m.messageError("dead-letter", fmt.Errorf("%w: %w", ErrNotConfirmed, err)))
		return
	}
	r.send(m, "term", termBody(headerValue(causeText(cause))))
}

// stopCause is the dead letter's cause for a message the stop could not
// hand back.
type stopCause struct{}

func (stopCause) Error() string { return "natsjs: the stop came on its last delivery" }

// copyOf returns a copy of m to publish to subject: its payload and
// headers, with the headers named Nats-* renamed Natsjs-Original-*, and
// Natsjs-Republished-From and Natsjs-Origin, m's stream sequence and
// origin. A copy of a copy keeps the first original's: its
// Natsjs-Original-*, Natsjs-Republished-From and Natsjs-Origin headers
// stay, and its own Nats-* headers, which Run set for its publication, go.
func copyOf(m *message, subject string) *nats.Msg {
	out := nats.NewMsg(subject)
	out.Data = m.msg.Data
	_, isCopy := m.msg.Header[hdrOrigin]
	if _, v31 := m.msg.Header[hdrFrom]; v31 {
		isCopy = true // a copy v3.1 made, before copies said their origin
	}
	for k, vs := range m.msg.Header {
		if rest, ok := strings.CutPrefix(k, "Nats-"); ok {
			if isCopy {
				continue // Run's own, for the copy's publication
			}
			k = "Natsjs-Original-" + rest
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	if _, kept := out.Header[hdrFrom]; !kept {
		_, seq, _, _ := m.info()
		out.Header.Set(hdrFrom, strconv.FormatUint(seq, 10))
	}
	if _, kept := out.Header[hdrOrigin]; !kept {
		out.Header.Set(hdrOrigin, m.origin())
	}
	return out
}

// publish publishes out with js, again while it fails, for up to within:
// out carries a Nats-Msg-Id, so that a publication whose answer was lost
// and that is published again is stored once.
func (r *run) publish(js jetstream.JetStream, out *nats.Msg, within time.Duration, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	// Publishing goes on after a stop: it is how a stop finishes.
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	pause := 50 * time.Millisecond
	for {
		try, cancelTry := context.WithTimeout(ctx, max(within/4, time.Second))
		ack, err := js.PublishMsg(try, out, opts...)
		cancelTry()
		if err == nil {
			return ack, nil
		}
		if refusedForGood(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
			pause = min(2*pause, time.Second)
		}
	}
}
