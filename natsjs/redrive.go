package natsjs

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A DeadLetter is a message [Run] published to a dead-letter subject (see
// [WithDeadLetter]), as [DeadLetters] reads it back from its stream.
type DeadLetter struct {
	// Sequence is the dead letter's sequence in the dead-letter stream,
	// which [Redrive] takes; Time is when that stream stored it.
	Sequence uint64
	Time     time.Time
	// Stream, Consumer and Subject say where the job failed: its stream,
	// the consumer Run served, and the subject it was published to, to
	// which Redrive publishes it again.
	Stream, Consumer, Subject string
	// Attempts is how many attempts the job used; Error, why it failed
	// for good.
	Attempts uint64
	Error    string
	// OriginalID is the job's [OriginalID].
	OriginalID string
	// Redriven counts the times the job was redriven before it failed
	// this time.
	Redriven int
	// Data and Header are the job's payload and headers, as the dead
	// letter carries them.
	Data   []byte
	Header nats.Header
}

// The headers a dead letter carries beside the job's own.
const (
	hdrDeadStream     = "Natsjs-Stream"
	hdrDeadConsumer   = "Natsjs-Consumer"
	hdrDeadSubject    = "Natsjs-Subject"
	hdrDeadSequence   = "Natsjs-Sequence"
	hdrDeadDeliveries = "Natsjs-Deliveries"
	hdrDeadError      = "Natsjs-Error"
	// hdrRedriven counts the times Redrive published the job again; a
	// dead letter's id carries it, so that the dead letter of a redriven
	// job that fails again is stored, not taken for a duplicate of the
	// one Redrive removed.
	hdrRedriven = "Natsjs-Redriven"
)

// DeadLetters returns the dead letters in stream dead, oldest first: the
// messages that carry the headers Run gives a dead letter; others are
// skipped. It reads one message per step, each with a request, and stops
// at the first error, which it yields.
func DeadLetters(ctx context.Context, dead jetstream.Stream) iter.Seq2[*DeadLetter, error] {
	return func(yield func(*DeadLetter, error) bool) {
		for seq := uint64(1); ; seq++ {
			raw, err := dead.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				return // none left
			case err != nil:
				yield(nil, fmt.Errorf("natsjs: reading dead letters: %w", err))
				return
			}
			seq = raw.Sequence
			if dl, ok := readDeadLetter(raw); ok && !yield(dl, nil) {
				return
			}
		}
	}
}

// readDeadLetter reads raw as a dead letter; false if it is none.
func readDeadLetter(raw *jetstream.RawStreamMsg) (*DeadLetter, bool) {
	h := raw.Header
	if h == nil || h.Get(hdrDeadSubject) == "" {
		return nil, false
	}
	attempts, _ := strconv.ParseUint(h.Get(hdrDeadDeliveries), 10, 64)
	redriven, _ := strconv.Atoi(h.Get(hdrRedriven))
	dl := &DeadLetter{
		Sequence: raw.Sequence, Time: raw.Time,
		Stream: h.Get(hdrDeadStream), Consumer: h.Get(hdrDeadConsumer), Subject: h.Get(hdrDeadSubject),
		Attempts: attempts, Error: h.Get(hdrDeadError), Redriven: redriven,
		Data: raw.Data, Header: h,
	}
	dl.OriginalID = h.Get("Natsjs-Original-Msg-Id")
	if dl.OriginalID == "" {
		dl.OriginalID = h.Get(hdrOrigin)
	}
	return dl, true
}

// Redrive moves the dead letter at seq in stream dead back to the
// subject its job was published to, with js, as a job like any other:
// its payload and headers, without the dead letter's own, and with a fresh
// count of attempts; then it deletes the dead letter. The job keeps its
// [OriginalID], so that a handler keyed on it knows the job, and the
// dead letter of a redriven job that fails again is stored as a new dead
// letter, with an id of its own (Natsjs-Redriven counts the redrives).
//
// The job is published to the stream it failed in (Nats-Expected-Stream),
// with the Nats-Msg-Id "natsjs-redrive:<origin>:<redrives>": a Redrive of
// the same dead letter again, after one that published the job but could
// not delete the dead letter, is a duplicate within that stream's
// duplicate window. In a stream with a per-subject limit (MaxMsgsPerSubject)
// it takes no other message's place, as Run's copies do not: if a newer
// message of the subject is stored, or the subject is full, Redrive
// returns an error wrapping [ErrSuperseded], or saying so, and leaves the
// dead letter where it is.
//
// Redrive returns an error, and changes nothing, if the message at seq is
// not a dead letter Run published.
func Redrive(ctx context.Context, js jetstream.JetStream, dead jetstream.Stream, seq uint64) error {
	raw, err := dead.GetMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("natsjs: Redrive: reading dead letter %d: %w", seq, err)
	}
	dl, ok := readDeadLetter(raw)
	if !ok {
		return fmt.Errorf("natsjs: Redrive: message %d of stream %q is not a dead letter of Run", seq, dead.CachedInfo().Config.Name)
	}
	out := nats.NewMsg(dl.Subject)
	out.Data = raw.Data
	for k, vs := range raw.Header {
		switch {
		case strings.HasPrefix(k, "Nats-"), k == hdrDeadStream, k == hdrDeadConsumer, k == hdrDeadSubject,
			k == hdrDeadSequence, k == hdrDeadDeliveries, k == hdrDeadError:
			continue // the dead letter's own
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	origin := raw.Header.Get(hdrOrigin)
	if origin == "" {
		origin = dl.Stream + ":" + raw.Header.Get(hdrDeadSequence)
		out.Header.Set(hdrOrigin, origin)
	}
	redriven := strconv.Itoa(dl.Redriven + 1)
	out.Header.Set(hdrRedriven, redriven)
	out.Header.Set("Nats-Msg-Id", "natsjs-redrive:"+origin+":"+redriven)

	var opts []jetstream.PublishOpt
	if dl.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(dl.Stream))
		more, err := redriveLimits(ctx, js, dl)
		if err != nil {
			return err
		}
		opts = append(opts, more...)
	}
	if _, err := js.PublishMsg(ctx, out, opts...); err != nil {
		if wrongLastSequence(err) {
			err = fmt.Errorf("%w: %w", ErrSuperseded, err)
		}
		return fmt.Errorf("natsjs: Redrive: publishing dead letter %d to %q: %w", seq, dl.Subject, err)
	}
	if err := dead.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("natsjs: Redrive: dead letter %d was published again, but not deleted (a Redrive again publishes a duplicate): %w", seq, err)
	}
	return nil
}

// redriveLimits returns the publish options that keep the redriven job dl
// from taking another message's place in a stream with a per-subject
// limit, or an error if it would.
func redriveLimits(ctx context.Context, js jetstream.JetStream, dl *DeadLetter) ([]jetstream.PublishOpt, error) {
	st, err := js.Stream(ctx, dl.Stream)
	if err != nil {
		return nil, fmt.Errorf("natsjs: Redrive: reading stream %q: %w", dl.Stream, err)
	}
	limit := st.CachedInfo().Config.MaxMsgsPerSubject
	if limit <= 0 {
		return nil, nil
	}
	failed, _ := strconv.ParseUint(dl.Header.Get(hdrDeadSequence), 10, 64)
	var last uint64
	switch raw, err := st.GetLastMsgForSubject(ctx, dl.Subject); {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return nil, fmt.Errorf("natsjs: Redrive: reading subject %q of stream %q: %w", dl.Subject, dl.Stream, err)
	default:
		last = raw.Sequence
	}
	if last > failed {
		return nil, fmt.Errorf("natsjs: Redrive: %w: message %d of subject %q is newer than the job", ErrSuperseded, last, dl.Subject)
	}
	if limit > 1 && last != 0 {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(dl.Subject))
		if err != nil {
			return nil, fmt.Errorf("natsjs: Redrive: counting subject %q of stream %q: %w", dl.Subject, dl.Stream, err)
		}
		if n := info.State.Subjects[dl.Subject]; int64(n) >= limit {
			return nil, fmt.Errorf("natsjs: Redrive: subject %q holds %d messages, its limit: the job would push out the oldest", dl.Subject, n)
		}
	}
	return []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(last)}, nil
}
