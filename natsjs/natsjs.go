// Package natsjs runs the messages of a NATS JetStream pull consumer as
// tasks of a [workerpool.Pool] or [workerpool.Subpool]: the pool becomes
// the executor of a durable work queue that many processes share.
//
//	cons, _ := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
//		Durable:    "workers",
//		AckPolicy:  jetstream.AckExplicitPolicy,
//		AckWait:    30 * time.Second,
//		MaxDeliver: 5,
//	})
//	p := workerpool.New(8)
//	err := natsjs.Run(ctx, p, cons, func(ctx context.Context, msg jetstream.Msg) error {
//		return process(ctx, msg.Data())
//	}, natsjs.WithJetStream(js)) // optional: cheaper pulls
//
// # Delivery
//
// Delivery is at least once. [Run] acks a message after its handler
// returns nil; an error, a panic or runtime.Goexit makes the message come
// back after a backoff, until the consumer's MaxDeliver, after which it is
// terminated (and copied to a dead-letter subject first, see
// [WithDeadLetter]). A message can be handled more than once when a
// process dies or loses its connection while it holds it, so handlers
// should be idempotent, keyed for example on the Nats-Msg-Id header or on
// the message's stream sequence.
//
// # Flow control and duplicates
//
// One process holds at most [WithMaxInFlight] messages: Run takes a slot
// for each message before it asks the server for it, and frees the slot
// once the server can no longer count the message as delivered to this
// process and not acked. It tells the server that every message it holds,
// waiting in the pool or running, is in progress, every
// [WithProgressInterval], so that the server redelivers none of them while
// the process has it, however long it waits or runs.
//
// How a handled message's slot is freed depends on how Run pulls. By
// default it pulls with the consumer's own Fetch, whose pulls the server
// may serve before it has processed an ack sent earlier: the slots of a
// batch of acks are freed when the server confirms the batch's last ack
// (an ack with a reply), which it does once it has processed every ack the
// connection sent to the consumer before. With [WithJetStream], Run pulls
// on the connection itself, and a handled message's slot goes at once
// into the next pull, which travels as the last ack of the batch (an ack
// with +NXT): the server processes an ack before it registers the pull
// the ack carries, and the acks of one connection to one consumer in the
// order they were sent. Either way the server never serves this process a
// pull in a slot whose ack it has not processed: the messages it counts
// as delivered to this process and not acked never exceed the bound. A
// process that dies therefore leaves at most WithMaxInFlight messages to
// be handled again: those it held, handled or partly handled, and those
// whose acks the server had not read. A connection lost for longer than
// AckWait, or a server that loses acks it read (a crash, a consumer leader
// change), can add up to WithMaxInFlight more each time.
//
// # Stopping
//
// When ctx is done, Run starts no more handlers and asks for no more
// messages. As soon as the pulls it sent end, within about a quarter of a
// second, it hands back (Nak) every message whose handler has not started, so
// that other processes get them without waiting for AckWait. It waits for
// the running handlers to finish, acks the handled messages, waits for the
// server to confirm that it processed those acks (at most five seconds),
// and returns nil. It does not stop the pool.
//
// Run waits for its pulls to end, rather than abandon them, because the
// server may already have sent them messages, which nobody would then hold
// until AckWait; and it hands messages back only then, because a message
// handed back while a pull is outstanding could come straight back to it,
// costing a delivery towards MaxDeliver.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go/jetstream"
)

// A Handler processes one message's job. nil acks the message; an error, a
// panic or runtime.Goexit makes it come back later (NakWithDelay), until
// the consumer's MaxDeliver, after which it is terminated (and sent to the
// dead-letter subject, if one is set).
//
// ctx is done when Run's ctx is done, or when Run stops because the pool
// stopped or the consumer is gone; no handler starts after that. A handler
// that returns an error once ctx is done has its message handed back at
// once, without the backoff. A handler may settle msg itself (Ack, Nak,
// Term); it should then return nil, and Run's own settling has no effect.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Run runs h on cons's messages as tasks of s, a [*workerpool.Pool] or a
// [*workerpool.Subpool], until ctx is done, then takes no more, Naks at
// once the messages it took but did not start (so another process gets
// them without waiting for AckWait), waits for the running handlers to
// finish and be acked, and returns nil. It does not stop s.
//
// cons must be a pull consumer with AckPolicy explicit. A panic in h is
// passed on to the pool, which recovers it as for any task (see
// [workerpool.WithPanicHandler]), once the message has been handed back.
//
// Run pulls with cons's own Fetch, unless [WithJetStream] gives it the
// JetStream context cons came from: then it pulls on that connection
// itself, which costs less per message (see WithJetStream).
//
// Run returns an error at once, without taking a message, if ctx, s, cons
// or h is nil; if an option is invalid (the error wraps
// jetstream.ErrInvalidOption); if cons cannot be served
// ([ErrInvalidConsumer]). It returns nil at once if ctx is already done.
// If s is stopped, before or while Run runs, Run stops as if ctx were done
// (it notices within about 100ms) and returns [workerpool.ErrStopped]:
// messages whose tasks s dropped or never started are handed back. If the
// consumer or its stream is deleted, or the connection is closed, Run
// stops likewise and returns an error that wraps the cause; so it does if
// the server refuses a pull as it would refuse every later one
// ([ErrPullRefused]). Other failures of a pull, and a lost connection that
// the client restores, make it pull again after a pause, and go to the
// [WithErrorHandler] function.
//
// Run reads the consumer's AckWait, BackOff and MaxDeliver when it starts
// and again every progress interval; its pull limits (MaxRequestBatch,
// MaxRequestExpires) only when it starts.
func Run(ctx context.Context, s workerpool.Submitter, cons jetstream.Consumer, h Handler, opts ...Option) error {
	switch {
	case ctx == nil:
		return errors.New("natsjs: Run: ctx is nil")
	case s == nil || reflect.ValueOf(s).IsNil():
		return errors.New("natsjs: Run: the pool is nil")
	case cons == nil || reflect.ValueOf(cons).Kind() == reflect.Pointer && reflect.ValueOf(cons).IsNil():
		return errors.New("natsjs: Run: the consumer is nil")
	case h == nil:
		return errors.New("natsjs: Run: the handler is nil")
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return cfg.err
	}
	info := cons.CachedInfo()
	if info == nil {
		return fmt.Errorf("natsjs: Run: the consumer has no info: %w", ErrInvalidConsumer)
	}
	c := info.Config
	switch {
	case c.AckPolicy != jetstream.AckExplicitPolicy:
		return fmt.Errorf("natsjs: Run: consumer %q has AckPolicy %v; Run needs AckExplicit: %w", info.Name, c.AckPolicy, ErrInvalidConsumer)
	case c.DeliverSubject != "":
		return fmt.Errorf("natsjs: Run: consumer %q is a push consumer: %w", info.Name, ErrInvalidConsumer)
	case c.MaxRequestExpires > 0 && c.MaxRequestExpires < minPullWait:
		return fmt.Errorf("natsjs: Run: consumer %q has MaxRequestExpires %v; Run's pulls wait at least %v: %w", info.Name, c.MaxRequestExpires, minPullWait, ErrInvalidConsumer)
	}
	floor := redeliveryFloor(c)
	progress := cfg.progress
	if progress == 0 {
		progress = floor / 3
	}
	if progress >= floor || progress <= 0 {
		return fmt.Errorf("natsjs: Run: progress interval %v is not below consumer %q's shortest redelivery delay (AckWait or BackOff) %v: %w", cfg.progress, info.Name, floor, jetstream.ErrInvalidOption)
	}
	size := poolSize(s)
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = 2 * max(size, 1)
	}
	if ctx.Err() != nil {
		return nil
	}
	if poolStopped(s) {
		return workerpool.ErrStopped
	}
	r := newRun(ctx, s, cons, h, cfg, size)
	r.name = info.Name
	r.maxBatch = cfg.maxInFlight
	if mb := c.MaxRequestBatch; mb > 0 {
		r.maxBatch = min(r.maxBatch, mb)
	}
	r.pullExpires = pullWait
	if c.MaxRequestExpires > 0 {
		r.pullExpires = min(r.pullExpires, c.MaxRequestExpires)
	}
	r.pullAt = max(1, min((cfg.maxInFlight-size)/2, r.maxBatch))
	r.maxDeliver.Store(int64(c.MaxDeliver))
	r.progressEvery.Store(int64(progress))
	if cfg.js == nil {
		r.path = &fetchPath{r: r, cons: cons}
	} else {
		if err := reaches(ctx, cfg.js, cons, info); err != nil {
			r.cancel()
			return err
		}
		raw, err := newRawPath(r, cfg.js, info)
		if err != nil {
			r.cancel()
			return err
		}
		r.path = raw
		r.pullDeadline = rawPullDeadline(r.pullExpires)
		r.canCarry = !noCarry
	}
	return r.run()
}

// reaches checks, before the raw path pulls through js, that js reaches
// cons: the same consumer, not one of the same name in another domain or
// account, whose pulls would never be answered.
func reaches(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, info *jetstream.ConsumerInfo) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	fresh, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("natsjs: Run: reading consumer %q: %w", info.Name, err)
	}
	via, err := js.Consumer(ctx, info.Stream, info.Name)
	if err != nil {
		return fmt.Errorf("natsjs: WithJetStream: consumer %q of stream %q cannot be reached through js (%v): %w", info.Name, info.Stream, err, jetstream.ErrInvalidOption)
	}
	if got := via.CachedInfo(); got == nil || !got.Created.Equal(fresh.Created) {
		return fmt.Errorf("natsjs: WithJetStream: js reaches another consumer %q of stream %q than cons: %w", info.Name, info.Stream, jetstream.ErrInvalidOption)
	}
	return nil
}

// redeliveryFloor returns the shortest time after which the server may
// redeliver a message that got no progress message: the consumer's AckWait,
// or the shortest of its BackOff durations, which replace AckWait.
func redeliveryFloor(c jetstream.ConsumerConfig) time.Duration {
	floor := c.AckWait
	if floor <= 0 {
		floor = defaultAckWait
	}
	for _, d := range c.BackOff {
		if d > 0 {
			floor = min(floor, d)
		}
	}
	return floor
}

// apiPrefix returns the JetStream API prefix of opts, ending in a dot.
func apiPrefix(opts jetstream.JetStreamOptions) string {
	switch {
	case opts.APIPrefix != "":
		if opts.APIPrefix[len(opts.APIPrefix)-1] != '.' {
			return opts.APIPrefix + "."
		}
		return opts.APIPrefix
	case opts.Domain != "":
		return "$JS." + opts.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

const (
	// defaultAckWait is the server's AckWait for a consumer that sets none.
	defaultAckWait = 30 * time.Second
	// pullWait is how long one pull waits for messages: about the longest
	// a stop waits for its pulls to end before it hands messages back (see
	// the package doc). An idle process sends a few pulls a second.
	pullWait = 250 * time.Millisecond
	// minPullWait is the shortest pull Run sends; a consumer whose
	// MaxRequestExpires is shorter would have it pull without a pause.
	minPullWait = 10 * time.Millisecond
	// poolPoll is how often Run checks whether its pool was stopped, and
	// gives up on pulls and probes the server did not answer in time.
	poolPoll = 100 * time.Millisecond
	// apiTimeout bounds a handler's DoubleAck whose ctx has no deadline,
	// as jetstream's default API timeout does for its own messages.
	apiTimeout = 5 * time.Second
)

// settleTimeout bounds the wait for an ack's confirmation and for a
// dead-letter publication. It is a variable so that a test can make it
// longer than the test.
var settleTimeout = 5 * time.Second

// noCarry makes the raw path's acker confirm each batch of acks, freeing
// its slots when the server answers, rather than carry the next pull in
// the last ack, as the fetch path must: a benchmark measures what carrying
// gives.
var noCarry = false
