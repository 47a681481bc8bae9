package natsjs

import (
	"context"
	"fmt"
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

// giveBack hands m, closed, back to the server for another process.
func (r *run) giveBack(m *message) {
	_, _, delivery, _ := m.info()
	switch {
	case r.maxDeliver.Load() <= 0:
		r.send(m, "nak", ackNak)
	case r.workQueue && !r.gone.Load():
		if err := r.republish(m, delivery); err != nil {
			if r.lastDelivery(delivery) {
				r.unconfirmed.Add(1)
				r.report(m.messageError("republish", fmt.Errorf("%w: %w", ErrNotConfirmed, err)))
				return
			}
			// The Nak costs the message a delivery, but loses nothing.
			r.report(m.messageError("republish", err))
			r.send(m, "nak", ackNak)
		}
	case r.lastDelivery(delivery):
		r.leaveLast(m, delivery)
	default:
		r.send(m, "nak", ackNak)
	}
}

// republish publishes a copy of m, delivered delivery times, to its own
// subject, in its work-queue stream, and terminates m.
func (r *run) republish(m *message, delivery uint64) error {
	stream, seq, _, ts := m.info()
	spent := m.attemptsBefore() // a copy whose handler failed for good keeps its count
	if _, final := m.finalError(); !final {
		spent += delivery - 1 // this delivery is no attempt
	}
	out := copyOf(m, m.msg.Subject)
	out.Header.Set("Nats-Msg-Id", "natsjs-republish:"+stream+":"+strconv.FormatUint(seq, 10)+":"+strconv.FormatInt(ts, 10))
	out.Header.Set(hdrAttempts, strconv.FormatUint(spent, 10))
	ack, err := r.publish(r.js, out, r.cfg.settleTimeout, jetstream.WithExpectStream(stream))
	if err != nil {
		return err
	}
	r.send(m, "term", termBody(fmt.Sprintf("natsjs: re-published as %s/%d: handed back", ack.Stream, ack.Sequence)))
	return nil
}

// leaveLast hands back m, on its last delivery outside a work queue: it
// dead-letters m if WithDeadLetter says where, and else leaves it in its
// stream. Either way a failure is reported and counted unconfirmed.
func (r *run) leaveLast(m *message, delivery uint64) {
	const why = "natsjs: the stop came on its last delivery"
	if r.cfg.deadLetterJS == nil {
		r.unconfirmed.Add(1)
		r.report(m.messageError("republish", fmt.Errorf("%w: %s, in a stream that is not a work queue, and no dead-letter subject is set: the message stays in its stream", ErrNotConfirmed, why)))
		return
	}
	if err := r.deadLetter(m, m.attemptsBefore()+delivery, stopCause{}); err != nil {
		r.unconfirmed.Add(1)
		r.report(m.messageError("dead-letter", fmt.Errorf("%w: %w", ErrNotConfirmed, err)))
		return
	}
	r.send(m, "term", termBody(why))
}

// stopCause is the dead letter's cause for a message the stop could not
// hand back.
type stopCause struct{}

func (stopCause) Error() string { return "natsjs: the stop came on its last delivery" }

// copyOf returns a copy of m to publish to subject: its payload and
// headers, with the headers named Nats-* renamed Natsjs-Original-*, and
// Natsjs-Republished-From, m's stream sequence. A copy of a copy keeps the
// first original's: a Natsjs-Original-* header m has already wins over the
// Nats-* header it would be renamed from, and its Natsjs-Republished-From
// stays.
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
	if _, kept := out.Header[hdrFrom]; !kept {
		_, seq, _, _ := m.info()
		out.Header.Set(hdrFrom, strconv.FormatUint(seq, 10))
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
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
			pause = min(2*pause, time.Second)
		}
	}
}
