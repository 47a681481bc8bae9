package natsjs

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// An Option configures one call of [Run]. An invalid option makes Run
// return an error that wraps jetstream.ErrInvalidOption, before it takes a
// message.
type Option func(*config)

// WithMaxInFlight bounds the messages the call of [Run] holds at once:
// queued for a worker, running, or acked without the server having
// confirmed it yet, and those its pulls may still bring. It is an upper
// bound only: Run holds what its workers will run within a few pull round
// trips (see [Run]), and never more than n. n must be at least 1. Without
// it, the bound is the pool's size plus 500.
//
// The bound is also what one process that dies can leave to be handled
// again: see the README's delivery table.
func WithMaxInFlight(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("WithMaxInFlight(%d): the bound must be at least 1", n)
			return
		}
		c.maxInFlight = n
	}
}

// WithMaxBytes bounds what the messages the call of [Run] holds weigh:
// those queued for a worker or running, and those its pulls may still
// bring. A message weighs its payload, headers, subject and ack subject,
// as the server counts it against a pull's max_bytes (nats.Msg.Size). Run
// asks the server for no more than the bound leaves, so it never holds
// more, but for one message at a time that is larger than the bound on
// its own, which it takes alone. So with messages of n/k bytes or more,
// fewer than k handlers run at once. 0 uses the default, [DefaultMaxBytes];
// a negative n sets no byte bound.
func WithMaxBytes(n int) Option {
	return func(c *config) {
		c.maxBytes = n
		if n == 0 {
			c.maxBytes = DefaultMaxBytes
		}
	}
}

// DefaultMaxBytes is the byte bound of [Run] by default (see
// [WithMaxBytes]): 64 MiB, librdkafka's bound on a consumer's queue,
// enough to keep 64 workers on messages of NATS's largest default
// payload, 1 MiB, busy; jetstream's own Messages iterator has none.
const DefaultMaxBytes = 64 << 20

// WithBackoff sets how long a message whose handler failed (returned an
// error, panicked or called runtime.Goexit) stays away before the server
// delivers it again, as a function of the delivery that failed: 1 for the
// first. A result of 0 or less redelivers at once. nil restores the
// default: the consumer's own BackOff, if it has one (the delay after
// delivery d is BackOff[d-1], its last value for later ones), else
// [DefaultBackoff].
func WithBackoff(f func(delivery uint64) time.Duration) Option {
	return func(c *config) { c.backoff = f }
}

// WithGracePeriod sets how long, once [Run]'s ctx is done, the running
// handlers keep their ctx before Run cancels it. 0 cancels it at once; d
// must not be negative. The default is [DefaultGracePeriod].
func WithGracePeriod(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithGracePeriod(%v): the grace period must not be negative", d)
			return
		}
		c.grace = d
	}
}

// DefaultGracePeriod is how long, by default, running handlers keep their
// ctx once [Run]'s ctx is done: long enough for most jobs to finish, short
// enough that a stop, its settling included, fits in the 30 seconds an
// orchestrator such as Kubernetes gives a process before it kills it.
const DefaultGracePeriod = 10 * time.Second

// WithHandlerTimeout gives every handler's ctx a deadline, d after the
// handler starts. A handler that fails once it has passed, for whatever
// reason, has used an attempt, as any other failure: its message comes
// back after the backoff, or, on the last attempt, is final. Run waits for
// a handler that does not return at its deadline, and keeps its message
// meanwhile (an answer after the deadline counts: nil acks the message).
// A failure once the stop has cancelled the handler's ctx, before the
// deadline passed, is the stop's, and no attempt (see [Run]). 0, the
// default, sets no deadline; d must not be negative.
func WithHandlerTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithHandlerTimeout(%v): the timeout must not be negative", d)
			return
		}
		c.handlerTimeout = d
	}
}

// WithKey keeps the order of each key's messages within the call of
// [Run]: key maps a message to its key (a customer, an account, a
// subject), and Run submits each message to the pool as a task of that
// key ([workerpool.Pool.SubmitKey], or the sub-pool's), in the order the
// server delivered them. The pool runs a key's tasks one at a time, in
// that order, beside the tasks of other keys and its other work: a flood
// of one key holds up no other. The keys are the pool's, or the
// sub-pool's: a task submitted there elsewhere with the same key waits
// for Run's of that key, and they for it.
//
// The order is the order of deliveries to this process. A message that
// fails comes back after its backoff, behind the messages of its key
// delivered meanwhile, and runs, as any redelivered message, once the
// key's earlier tasks are done. Across processes there is no order:
// another process may run a message of the same key at the same time.
// Run waits for a key's running task at a stop, but hands back at once
// its messages that did not start, which another process may then run
// first.
//
// With a key, Run holds what the pool's workers would run within the
// horizon, as if each ran one of its runners (see [Run]), and a message
// waits in the pool's queue for its key or a worker: a pool busy with
// other work holds them there, where without a key Run would not take
// them. A message is one task of the pool: [workerpool.Status] counts
// messages, not runners. With a bounded queue that blocks, Run waits for
// room, and a stop for that wait. A panic in key fails the message as a
// panic of its handler would, and is not passed to the pool. key must not
// be nil.
func WithKey(key func(msg jetstream.Msg) string) Option {
	return func(c *config) {
		if key == nil {
			c.invalid("WithKey(nil): the key function is nil")
			return
		}
		c.key = key
	}
}

// WithProgressInterval sets how often [Run] tells the server that each
// message it holds, waiting for a worker or running, is still in progress,
// which restarts the message's AckWait. 0 uses the default, a third of the
// consumer's shortest redelivery delay: its AckWait, or the shortest of
// its BackOff durations if it has some. d must not be negative, and must
// be below that delay.
func WithProgressInterval(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithProgressInterval(%v): the interval must not be negative", d)
			return
		}
		c.progress = d
	}
}

// WithDeadLetter makes [Run] publish, with js, a copy of every message
// whose handler failed for the last time (on the consumer's MaxDeliver, or
// with a [Permanent] error) to subject, before it terminates the message.
// The copy has the message's payload and headers, except headers named
// Nats-*, which are instructions to the server for the original
// publication (a Nats-Expected-* header would make the copy's publication
// fail); their values are kept under Natsjs-Original-*. Headers
// Natsjs-Stream, Natsjs-Consumer, Natsjs-Subject, Natsjs-Sequence,
// Natsjs-Deliveries and Natsjs-Error say where the message came from and
// why it failed (for a panic, its value), and Natsjs-Origin names the
// first original ("<stream>:<sequence>:<stored time in Unix ns>"). The
// copy's Nats-Msg-Id is "natsjs-dead:<origin>", derived from the first
// original, the same for the dead letter of every copy Run made of it (at
// a stop, or because a dead letter's answer came too late), so that a
// stream with a duplicate window keeps one dead letter of the job when Run
// publishes it again.
//
// Run publishes the copy without the worker whose handler failed, which
// goes on to the next message, and keeps the message, with its progress
// messages, until the copy is published, trying for the dead-letter
// timeout (see [WithDeadLetterTimeout]). A stream must capture subject: if
// the copy cannot be published, Run tells the [WithErrorHandler] function,
// and, rather than lose the message or run its handler again: in a
// work-queue stream, it publishes a copy of the message to its own subject
// with the header Natsjs-Final-Error (the cause) and Natsjs-Attempts, and
// terminates the message; a Run that gets such a copy does not run its
// handler but tries the dead letter again, and, failing, Naks it with the
// backoff (on the copy's last delivery, copies it again); without a
// dead-letter subject, it terminates it. So the message reaches the
// dead-letter subject once a stream captures it. In another stream, where
// a copy would reach every consumer, Run leaves the message: the server
// delivers it again after AckWait, but after its last delivery. A dead
// letter has neither header, so that publishing it again to its original
// subject makes a job like any other.
//
// js must not be nil, and subject must be one a message can be published
// to: not empty, without a wildcard or white space. The js of Run's
// arguments pulls; this one only publishes dead letters, and may reach
// another domain or account.
func WithDeadLetter(js jetstream.JetStream, subject string) Option {
	return func(c *config) {
		switch {
		case js == nil:
			c.invalid("WithDeadLetter: js is nil")
		case !validPublishSubject(subject):
			c.invalid("WithDeadLetter: %q is not a subject one can publish to", subject)
		default:
			c.deadLetterJS, c.deadLetterSubject = js, subject
		}
	}
}

// WithDeadLetterTimeout sets how long [Run] tries to publish a dead letter
// (see [WithDeadLetter]) before it gives up on it. The worker whose
// handler failed does not wait for it: it goes on to the next message,
// while Run keeps the failed one, with its progress messages, until the
// dead letter is published or given up on. 0 uses the default,
// [DefaultDeadLetterTimeout]; d must not be negative.
func WithDeadLetterTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithDeadLetterTimeout(%v): the timeout must not be negative", d)
			return
		}
		c.deadLetterTimeout = d
	}
}

// DefaultDeadLetterTimeout is how long, by default, [Run] tries to publish
// a dead letter: long enough for a JetStream that answers, short enough
// that a dead-letter subject no stream captures is said at once.
const DefaultDeadLetterTimeout = 2 * time.Second

// WithErrorHandler sets a function that [Run] tells of what goes wrong
// without ending it: each handler failure, as a [*HandlerError] (after
// Run settled the message); each message Run could not settle, as a
// [*MessageError] (an ack, Nak, Term or progress message that could not
// be sent, a settling the server did not confirm, a copy that could not be
// published); a pull the server did not answer or refused for a while.
// Run calls f from its own goroutines and from the pool's workers, one
// call at a time, after it settled the message concerned; f must not
// block for long. A panic in f is logged (log/slog) and dropped. nil, the
// default, drops them.
func WithErrorHandler(f func(error)) Option {
	return func(c *config) { c.onError = f }
}

// DefaultBackoff is the delay [Run] uses by default, for a consumer
// without a BackOff of its own, before a failed message comes back: for
// delivery d, a random duration between half and all of 2^(d-1) seconds,
// capped at a minute (between 0.5s and 1s after the first failure, 1s and
// 2s after the second, ...). The randomness spreads the retries of jobs
// that failed together, such as when a service they depend on was down.
func DefaultBackoff(delivery uint64) time.Duration {
	if delivery < 1 {
		delivery = 1
	}
	base := min(time.Second<<min(delivery-1, 6), time.Minute)
	return base/2 + rand.N(base/2+1)
}

// config is one Run call's configuration after options were applied.
type config struct {
	maxInFlight       int // 0: no bound but the pool's size + maxAhead
	maxBytes          int // below 0: none
	backoff           func(uint64) time.Duration
	grace             time.Duration
	progress          time.Duration // 0: a third of the shortest redelivery delay
	deadLetterJS      jetstream.JetStream
	deadLetterSubject string
	onError           func(error)
	deadLetterTimeout time.Duration              // 0: DefaultDeadLetterTimeout
	handlerTimeout    time.Duration              // 0: none
	key               func(jetstream.Msg) string // nil: no key order
	settleTimeout     time.Duration              // set by tests only; 0: settleTimeout
	minAhead          int                        // set by tests only: see flow.minAhead
	err               error                      // the first invalid option
}

// invalid records an invalid option, unless one was recorded already.
func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("natsjs: "+format+": %w", append(args, jetstream.ErrInvalidOption)...)
	}
}

// newConfig applies opts; the config's err says whether one was invalid.
func newConfig(opts []Option) config {
	c := config{grace: DefaultGracePeriod, maxBytes: DefaultMaxBytes}
	for i, opt := range opts {
		if opt == nil {
			c.invalid("option %d is nil", i)
			continue
		}
		opt(&c)
	}
	if c.settleTimeout <= 0 {
		c.settleTimeout = settleTimeout
	}
	if c.deadLetterTimeout == 0 {
		c.deadLetterTimeout = DefaultDeadLetterTimeout
	}
	return c
}

// validPublishSubject reports whether s is a subject a message can be
// published to: non-empty tokens separated by dots, no wildcard, no space.
func validPublishSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}
