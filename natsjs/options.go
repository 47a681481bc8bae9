package natsjs

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// An Option configures one call of [Consume].
type Option func(*config)

// WithMaxInFlight bounds the messages the call of [Consume] holds at once:
// those waiting in the pool, running, or being settled, and those a pull
// it sent may still bring. n must be at least 1; the default, taken when
// Consume starts, is twice the pool's [workerpool.Pool.Size].
//
// WithMaxInFlight panics if n < 1.
func WithMaxInFlight(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("natsjs: WithMaxInFlight(%d): the bound must be at least 1", n))
	}
	return func(c *config) { c.maxInFlight = n }
}

// WithBackoff sets how long a message whose handler failed (returned an
// error or panicked) stays away before the server delivers it again, as a
// function of the delivery that failed: 1 for the first. A result of 0 or
// less redelivers at once. nil restores the default, [DefaultBackoff].
func WithBackoff(f func(delivery uint64) time.Duration) Option {
	return func(c *config) { c.backoff = f }
}

// WithProgressInterval sets how often [Consume] tells the server that each
// message it holds, waiting in the pool or running, is still in progress,
// which restarts the message's AckWait. 0 uses the default, a third of the
// consumer's AckWait; Consume returns an error if d is not below AckWait.
//
// WithProgressInterval panics if d is negative.
func WithProgressInterval(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("natsjs: WithProgressInterval(%v): the interval must not be negative", d))
	}
	return func(c *config) { c.progress = d }
}

// WithDeadLetter makes [Consume] publish, with js, a copy of every message
// whose handler failed on its last delivery (the consumer's MaxDeliver) to
// subject, before it terminates the message. The copy has the message's
// payload and headers, except headers named Nats-*, which are instructions
// to the server for the original publication (a Nats-Expected-* header
// would make the copy's publication fail); their values are kept under
// Natsjs-Original-*. Headers Natsjs-Stream, Natsjs-Consumer, Natsjs-Subject,
// Natsjs-Sequence, Natsjs-Deliveries and Natsjs-Error say where the message
// came from and why it failed.
//
// A stream must capture subject: if the copy cannot be published, Consume
// does not terminate the message, which then stays in its stream (the server
// delivers it no more) rather than be lost.
//
// WithDeadLetter panics if js is nil or subject is not a subject one can
// publish to (empty, with a wildcard or white space).
func WithDeadLetter(js jetstream.JetStream, subject string) Option {
	if js == nil {
		panic("natsjs: WithDeadLetter: js is nil")
	}
	if !validPublishSubject(subject) {
		panic(fmt.Sprintf("natsjs: WithDeadLetter: %q is not a subject one can publish to", subject))
	}
	return func(c *config) { c.deadLetterJS, c.deadLetterSubject = js, subject }
}

// DefaultBackoff is the delay [WithBackoff] uses by default: 1s after the
// first failed delivery, doubling with each delivery up to a minute.
func DefaultBackoff(delivery uint64) time.Duration {
	if delivery < 1 {
		delivery = 1
	}
	return min(time.Second<<min(delivery-1, 6), time.Minute)
}

// config is one Consume call's configuration after options were applied.
type config struct {
	maxInFlight       int // 0: twice the pool's size
	backoff           func(uint64) time.Duration
	progress          time.Duration // 0: a third of AckWait
	deadLetterJS      jetstream.JetStream
	deadLetterSubject string
}

// newConfig applies opts. A nil option is a programming error: it panics,
// as the options' own checks do.
func newConfig(opts []Option) config {
	var c config
	for i, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("natsjs: option %d is nil", i))
		}
		opt(&c)
	}
	if c.backoff == nil {
		c.backoff = DefaultBackoff
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
