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
//	err := natsjs.Run(ctx, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
//		return process(ctx, msg.Data())
//	})
//
// # Delivery
//
// Delivery is at least once. [Run] acks a message after its handler
// returns nil. An error, a panic or runtime.Goexit makes the message come
// back after a backoff, until the consumer's MaxDeliver; a failure on the
// last delivery, or a [Permanent] one, is final: the message is copied to
// a dead-letter subject (see [WithDeadLetter]), then terminated. A message
// can be handled more than once when a process dies or loses its
// connection while it holds it, so handlers should be idempotent, keyed
// on [OriginalID], which is the same for a message and every copy Run
// publishes of it. A handler that returns [Snooze] has its message back
// later without using an attempt. [DeadLetters] and [Redrive] read dead
// letters back and move them to their subjects again.
//
// # Flow
//
// Run pulls on one subscription of js's connection for the whole run. It
// holds, beyond the messages its handlers run, what its workers will run
// within the horizon, a few pull round trips (at least 10ms): as many
// messages as the handlers get through in that time, at most 500, and
// none until a handler has finished. So fast jobs have hundreds of
// messages ready, jobs that take longer than the horizon have none
// waiting, and a pool busy with other work holds nothing it cannot start:
// Run asks the pool for a worker (a task that only checks in) before it
// asks the server for a message to run on it. [WithMaxInFlight] adds an
// upper bound on their number, and [WithMaxBytes] one on what they weigh,
// [DefaultMaxBytes] (64 MiB) by default.
//
// Run's tasks on the pool are runners, not messages: a runner runs the
// waiting messages one after another, and waits for the next one for up
// to the horizon while messages arrive, then gives its worker back. After
// a horizon of work it gives its worker back to the pool's other waiting
// tasks, if there are any (on a sub-pool, always), and goes to the back of
// the queue. So a pool's [workerpool.Status] counts runners, not messages.
// Every message Run holds, waiting or running, gets a progress message
// (InProgress) every [WithProgressInterval], so that the server
// redelivers none of them while the process has it, however long that is,
// as long as each reaches the server within the consumer's AckWait. A
// process starved of CPU (or a link that slow) for longer than AckWait
// less that interval lets the server deliver a held message again, to
// whichever process pulls: a delivery towards MaxDeliver. Run recognizes
// its own held messages and does not run their handlers again: each is
// settled once, on its latest delivery, which its Metadata then says;
// another process would handle it as any message.
//
// # Stopping
//
// When ctx is done, Run takes no more messages and starts no handler. As
// soon as the pulls it sent end, within about a quarter of a second, it
// hands back every message that waited, so that another process gets it
// without waiting for AckWait: a Nak, or, in a work-queue stream whose
// consumer has a MaxDeliver, a copy re-published to the message's own
// subject, so that the hand-back costs no attempt (see [Run]). The running
// handlers keep their ctx for a grace period ([WithGracePeriod], by
// default [DefaultGracePeriod]); then it is cancelled. A handler that
// fails once its ctx is cancelled failed because of the stop: the failure
// is not an attempt, and its message is handed back as the waiting ones
// are, once the pulls have ended (handed back while one of the run's own
// pulls is open, it could be redelivered straight into it). Run
// waits for every handler to return, asks the server to confirm everything
// the stop settled, and returns nil, or an error wrapping
// [ErrNotConfirmed] if the server did not confirm some of it (the error
// handler is told which). It does not stop the pool.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A Handler processes one message's job. nil acks the message; an error, a
// panic or runtime.Goexit makes it come back later, after the backoff
// (see [WithBackoff]), until the consumer's MaxDeliver; a failure on the
// last delivery, or a [Permanent] one, is final (see [WithDeadLetter]).
//
// ctx has the values of [Run]'s ctx, but not its deadline. It is
// cancelled a grace period after Run's ctx is done (see
// [WithGracePeriod]), or at once when Run stops because the pool stopped,
// the consumer is gone or the connection was closed; and it has a
// deadline if [WithHandlerTimeout] sets one. A handler that returns an
// error once the stop cancelled ctx has its message handed back by the
// stop, the failure not counted as an attempt; past its deadline, it has
// failed an attempt. A [Snooze] is kept even then.
// A handler may settle msg itself (Ack, Nak, Term); it should then return
// nil, and Run's own settling has no effect.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Run runs h on cons's messages as tasks of s, a [*workerpool.Pool] or a
// [*workerpool.Subpool], until ctx is done, then stops softly (see the
// package doc) and returns. It does not stop s. js is the JetStream
// context cons came from: Run pulls on its connection (a
// jetstream.Consumer does not give it), and re-publishes with it.
//
// A message Run hands back, because its handler did not start or failed
// because of the stop, has not used an attempt. The server would count the
// delivery of a Nak'd message against the consumer's MaxDeliver all the
// same, and never deliver again one Nak'd on its last delivery. So in a
// work-queue stream whose consumer has a MaxDeliver, Run publishes a copy
// to the message's own subject, which the stream stores as a new message,
// at its end, then terminates the message; the copy's header
// Natsjs-Attempts says how many attempts the message had used, and Run
// counts the copy's deliveries on from there: the attempt a [HandlerError]
// and the backoff count, and the last one, where a failure is final, is
// still the MaxDeliver-th. The copy keeps the payload and headers, with
// the Nats-* headers renamed Natsjs-Original-* (the first original's, for
// a copy of a copy), and has Nats-Msg-Id
// "natsjs-republish:<stream>:<sequence>:<timestamp>", so that the stream
// stores one copy if Run publishes it twice, and Natsjs-Republished-From,
// the first original's stream sequence. Without a MaxDeliver, Run Naks:
// the message keeps its place, and its delivery count, which the default
// backoff depends on, grows by one. In another stream, where a copy would
// reach every consumer, Run Naks too, which costs the message a delivery;
// on its last delivery, Run dead-letters it (see [WithDeadLetter]), or,
// without a dead-letter subject, leaves it and says so
// ([ErrNotConfirmed]). A copy never takes the place of another message.
// In a stream with a per-subject limit (MaxMsgsPerSubject), it is
// published only while the message is the last of its subject, and, with
// a limit above 1, while the subject has room; a message a newer one
// pushed out is superseded, and terminated without a copy (the error
// handler hears [ErrSuperseded]). In a stream bounded by MaxMsgs or
// MaxBytes that drops its oldest message when full (DiscardOld), it is
// published only while the stream has room for it, but where what it
// pushes out is the message itself (the oldest of the stream, or the last
// of its subject under a per-subject limit of 1). A copy that cannot be
// published (a stream full, a subject full, DiscardNew) falls back to a
// Nak at once, or, on the last delivery, to what is done outside a work
// queue. A copy whose publication the server did not confirm within the
// settle timeout (5s) is looked for once; if it is not stored, Run Naks
// the message all the same, and reports [ErrNotConfirmed]: the copy may
// still be stored, and its job handled twice.
//
// cons must be a pull consumer with AckPolicy explicit. A panic in h is
// passed on to the pool, which recovers it as for any task (see
// [workerpool.WithPanicHandler]), once the message has been settled.
//
// Run returns an error at once, without taking a message, if ctx, s, js,
// cons or h is nil; if an option is invalid (the error wraps
// jetstream.ErrInvalidOption); if js does not reach cons (a js of another
// domain, API prefix, account or server, where no JetStream answers or the
// one that does has no such consumer: jetstream.ErrInvalidOption too); if
// cons cannot be served ([ErrInvalidConsumer]); if the consumer cannot be
// read, through cons or js, for another reason (the error wraps the
// cause). It returns nil at once if ctx is already done, and nil if ctx is
// done while it reads the consumer, before it takes a message.
//
// If s is stopped, before or while Run runs, Run stops as if ctx were
// done, without the grace period (it notices within about 100ms), and
// returns [workerpool.ErrStopped]. If the consumer or its stream is
// deleted, or the connection is closed, Run stops likewise and returns an
// error that wraps the cause; so it does if the server refuses a pull as
// it would refuse every later one ([ErrPullRefused]). Other failures of a
// pull, and a lost connection that the client restores, make it pull
// again after a pause, and go to the [WithErrorHandler] function. After a
// stop caused by ctx, Run returns nil, or an error wrapping
// [ErrNotConfirmed] if the server did not confirm all that the stop
// settled; if the consumer or its stream is deleted during the stop, the
// running handlers lose their ctx as soon as Run notices (it reads the
// consumer every second meanwhile), and Run returns an error that wraps
// the cause.
//
// Run reads the consumer's AckWait, BackOff and MaxDeliver when it starts
// and again every progress interval; its pull limits (MaxRequestBatch,
// MaxRequestExpires) only when it starts.
func Run(ctx context.Context, s workerpool.Submitter, js jetstream.JetStream, cons jetstream.Consumer, h Handler, opts ...Option) error {
	switch {
	case ctx == nil:
		return errors.New("natsjs: Run: ctx is nil")
	case isNil(s):
		return errors.New("natsjs: Run: the pool is nil")
	case isNil(js):
		return errors.New("natsjs: Run: js is nil")
	case isNil(cons):
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
	if cfg.progress != 0 && cfg.progress >= floor {
		return fmt.Errorf("natsjs: Run: progress interval %v is not below consumer %q's shortest redelivery delay (AckWait or BackOff) %v: %w", cfg.progress, info.Name, floor, jetstream.ErrInvalidOption)
	}
	if ctx.Err() != nil {
		return nil
	}
	if poolStopped(s) {
		return workerpool.ErrStopped
	}
	r := &run{s: s, js: js, nc: js.Conn(), cons: cons, h: h, cfg: cfg, name: info.Name, flow: newFlow(), parent: ctx}
	r.flow.minAhead = cfg.minAhead
	r.runnerTask = r.runTask
	if err := r.reach(ctx, info); err != nil {
		if ctx.Err() != nil {
			// ctx was done while Run read the consumer: as if it had
			// been done before the call.
			return nil
		}
		return err
	}
	r.setConsumer(c)
	r.reconnects = r.nc.Stats().Reconnects
	if cfg.progress != 0 {
		r.progressEvery.Store(int64(cfg.progress))
	}
	r.maxBatch = 1 << 30
	if mb := c.MaxRequestBatch; mb > 0 {
		r.maxBatch = mb
	}
	r.flow.setByteBound(cfg.maxBytes, c.MaxRequestMaxBytes)
	if cfg.key != nil {
		r.flow.setKeyed()
	}
	r.pullExpires = pullWait
	if c.MaxRequestExpires > 0 {
		r.pullExpires = min(r.pullExpires, c.MaxRequestExpires)
	}
	r.pullDeadline = 2*r.pullExpires + time.Second
	r.stopCtx, r.stopAll = context.WithCancel(ctx)
	context.AfterFunc(r.stopCtx, r.beginStop)
	r.hctx, r.hcancel = context.WithCancel(context.WithoutCancel(ctx))
	r.checkCtx, r.endChecks = context.WithCancel(context.WithoutCancel(ctx))
	if err := r.subscribe(info); err != nil {
		r.stopAll()
		r.hcancel()
		r.endChecks()
		return err
	}
	return r.run()
}

// isNil reports whether v is nil, or a nil pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// reach checks, before Run pulls through js, that js reaches cons: the
// same consumer, not one of the same name in another domain or account,
// whose pulls would never be answered. It reads the stream's retention
// and per-subject limits, which decide how a message is copied, and times
// the round trips, the first measure of a pull's.
func (r *run) reach(ctx context.Context, info *jetstream.ConsumerInfo) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	fresh, err := r.cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("natsjs: Run: reading consumer %q: %w", info.Name, err)
	}
	start := time.Now()
	via, err := r.js.Consumer(ctx, info.Stream, info.Name)
	switch {
	case unreachable(err):
		return fmt.Errorf("natsjs: Run: consumer %q of stream %q cannot be reached through js: %w: %w", info.Name, info.Stream, err, jetstream.ErrInvalidOption)
	case err != nil:
		return fmt.Errorf("natsjs: Run: reading consumer %q of stream %q through js: %w", info.Name, info.Stream, err)
	}
	r.sampleRTT(time.Since(start))
	if got := via.CachedInfo(); got == nil || !got.Created.Equal(fresh.Created) {
		return fmt.Errorf("natsjs: Run: js reaches another consumer %q of stream %q than cons: %w", info.Name, info.Stream, jetstream.ErrInvalidOption)
	}
	stream, err := r.js.Stream(ctx, info.Stream)
	if err != nil {
		return fmt.Errorf("natsjs: Run: reading stream %q: %w", info.Stream, err)
	}
	sc := stream.CachedInfo().Config
	r.stream = stream
	r.workQueue = sc.Retention == jetstream.WorkQueuePolicy
	r.perSubject = sc.MaxMsgsPerSubject
	r.refusesPerSubject = sc.Discard == jetstream.DiscardNew && sc.DiscardNewPerSubject
	if sc.Discard == jetstream.DiscardOld {
		r.maxMsgs, r.maxBytes = sc.MaxMsgs, sc.MaxBytes
	}
	return nil
}

// unreachable reports whether err, the failure of a request for a
// consumer through js, says that js reaches no such consumer: no JetStream
// answers there, or the one that does has no such stream or consumer. A
// failure that says nothing of js, such as a timeout or a cancelled ctx,
// is not one.
func unreachable(err error) bool {
	for _, e := range []error{nats.ErrNoResponders, jetstream.ErrJetStreamNotEnabled, jetstream.ErrJetStreamNotEnabledForAccount,
		jetstream.ErrStreamNotFound, jetstream.ErrConsumerNotFound} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
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
