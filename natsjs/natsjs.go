// Package natsjs runs the messages of a NATS JetStream pull consumer as
// tasks of a [workerpool.Pool]: the pool becomes the executor of a durable
// work queue that many processes share.
//
//	cons, _ := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
//		Durable:    "workers",
//		AckPolicy:  jetstream.AckExplicitPolicy,
//		AckWait:    30 * time.Second,
//		MaxDeliver: 5,
//	})
//	p := workerpool.New(8)
//	err := natsjs.Consume(ctx, p, cons, func(ctx context.Context, msg jetstream.Msg) error {
//		return process(ctx, msg.Data())
//	})
//
// # Delivery
//
// Delivery is at least once. [Consume] acks a message after its handler
// returns nil; an error or a panic makes the message come back after a
// backoff, until the consumer's MaxDeliver, after which it is terminated
// (and copied to a dead-letter subject first, see [WithDeadLetter]). A
// message can be handled more than once when a process dies or loses its
// connection while it holds it, so handlers should be idempotent, keyed for
// example on the Nats-Msg-Id header or on the message's stream sequence.
//
// A message stays held, in its slot, until the server has confirmed that
// it processed its ack (the worker is free as soon as the handler returns).
// Consume acks the messages handled meanwhile in a batch and asks the
// server to confirm the batch's last ack only: the server processes one
// connection's acks to one consumer in the order they were sent, so its
// answer confirms the whole batch. The server therefore knows of every
// message a process handled except those it holds. A process that dies
// leaves at most [WithMaxInFlight] messages that were handled, or partly
// handled, and will be handled again; the others it held come back
// untouched. So does a process that loses its connection for longer than
// AckWait: the messages it held go to others, and it may still finish them.
// Both bounds assume the process sent its progress messages in time (see
// [WithProgressInterval]): a process too starved of CPU to do so for most
// of an AckWait may have any message it holds redelivered. A confirmation
// that fails, because the connection was lost or the server did not answer
// within five seconds, gives its batch's slots back: the server redelivers,
// after AckWait, any of the batch's messages whose ack it did not get.
//
// # Flow control
//
// One process holds at most [WithMaxInFlight] messages: Consume takes a slot
// for each message before it asks the server for it, and gives the slot back
// when the message is settled. It tells the server that every message it
// holds, waiting in the pool or running, is in progress, every
// [WithProgressInterval], so that the server redelivers none of them while
// the process has it, however long it waits or runs.
//
// # Stopping
//
// When ctx is done, Consume starts no more handlers and asks for no more
// messages. As soon as the pull it had sent ends, within half a second, it
// hands back (Nak) every message whose handler has not started, so that
// other processes get them without waiting for AckWait. It waits for the
// running handlers to finish and their messages to be settled, and returns
// nil. It does not stop the pool.
//
// Consume waits for its last pull to end, rather than abandon it, because
// the server may already have sent that pull a message, which nobody would
// then hold until AckWait; and it hands messages back only then, because a
// message handed back while the pull is outstanding could come straight
// back to it, costing a delivery towards MaxDeliver.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go/jetstream"
)

// A Handler processes one message's job. nil acks the message; an error or
// a panic makes it come back later (NakWithDelay), until the consumer's
// MaxDeliver, after which it is terminated (and sent to the dead-letter
// subject, if one is set).
//
// ctx is done when Consume's ctx is done, or when Consume stops because
// the pool stopped or the consumer is gone; no handler starts after that.
// A handler that returns an error once ctx is done has its message handed
// back at once, without the backoff.
// A handler may settle msg itself (Ack, Nak, Term); it should then return
// nil, and Consume's own settling has no effect. Consume confirms the
// handler's settling with its batch of acks (see Delivery in the package
// doc), unless Consume has nothing of its own to ack in that batch.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Consume runs h on cons's messages as tasks of p until ctx is done, then
// takes no more, Naks at once the messages it took but did not start (so
// another process gets them without waiting for AckWait), waits for the
// running handlers to finish and ack, and returns nil. It does not stop p.
//
// cons must be a pull consumer with AckPolicy explicit. A panic in h is
// passed on to p, which recovers it as for any task (see
// [workerpool.WithPanicHandler]), once the message has been handed back.
//
// Consume returns an error at once, without taking a message, if ctx, p,
// cons or h is nil, if cons does not ack explicitly, or if the progress
// interval is not below cons's AckWait; it returns nil at once if ctx is
// already done. If p is stopped, before or while Consume runs, Consume stops
// as if ctx were done (it notices within about 100ms) and returns
// [workerpool.ErrStopped]: messages whose tasks p dropped or never started
// are handed back. If the consumer or its stream is deleted, or the
// connection is closed, Consume stops likewise and returns an error that
// wraps the cause. Other pull errors, and a lost connection that the client
// restores, make it pull again after a pause.
//
// Consume panics with a "natsjs: " message if an option is nil.
func Consume(ctx context.Context, p *workerpool.Pool, cons jetstream.Consumer, h Handler, opts ...Option) error {
	switch {
	case ctx == nil:
		return errors.New("natsjs: Consume: ctx is nil")
	case p == nil:
		return errors.New("natsjs: Consume: pool is nil")
	case cons == nil:
		return errors.New("natsjs: Consume: consumer is nil")
	case h == nil:
		return errors.New("natsjs: Consume: handler is nil")
	}
	cfg := newConfig(opts)
	info := cons.CachedInfo()
	if info == nil {
		return errors.New("natsjs: Consume: the consumer has no info")
	}
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		return fmt.Errorf("natsjs: Consume: consumer %q has AckPolicy %v; Consume needs AckExplicit", info.Name, info.Config.AckPolicy)
	}
	ackWait := info.Config.AckWait
	if ackWait <= 0 {
		ackWait = defaultAckWait
	}
	if cfg.progress == 0 {
		cfg.progress = ackWait / 3
	}
	if cfg.progress >= ackWait {
		return fmt.Errorf("natsjs: Consume: progress interval %v is not below consumer %q's AckWait %v", cfg.progress, info.Name, ackWait)
	}
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = 2 * p.Size()
	}
	if ctx.Err() != nil {
		return nil
	}
	if p.Stopped() {
		return workerpool.ErrStopped
	}
	maxBatch := min(cfg.maxInFlight, maxPullBatch)
	if mb := info.Config.MaxRequestBatch; mb > 0 {
		maxBatch = min(maxBatch, mb)
	}
	return newRun(ctx, p, cons, h, cfg, info.Config.MaxDeliver, maxBatch).run()
}

const (
	// defaultAckWait is the server's AckWait for a consumer that sets none.
	defaultAckWait = 30 * time.Second
	// maxPullBatch bounds one pull, whatever WithMaxInFlight allows: each
	// pull allocates buffers for its whole batch.
	maxPullBatch = 1024
	// pullWait is how long one pull waits for messages: the longest a stop
	// waits for its last pull to end before it hands messages back (see
	// the package doc). An idle process sends two pulls a second.
	pullWait = 500 * time.Millisecond
	// poolPoll is how often Consume checks whether its pool was stopped.
	poolPoll = 100 * time.Millisecond
)

// settleTimeout bounds the wait for an ack's confirmation and for a
// dead-letter publication. It is a variable so that a test can make it
// longer than the test.
var settleTimeout = 5 * time.Second
