package natsjs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAConsumerWithAShortMaxRequestExpiresIsServed(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	workQueue(t, js, 30*time.Second, 0)
	require.NoError(t, js.DeleteConsumer(context.Background(), "JOBS", "workers"))
	// v1 pulled for 500ms: every pull was refused, and it retried for ever.
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "short", AckPolicy: jetstream.AckExplicitPolicy, MaxRequestExpires: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	publishJobs(t, js, 20)

	ta := newTally()
	var errs []error
	var mu sync.Mutex
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	}, natsjs.WithErrorHandler(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	// Idle for a few pulls' expiries: none of them is refused.
	info := consumerInfo(t, cons)
	for range 3 {
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, stop())
	requireEachOnce(t, ta, 20)
	mu.Lock()
	assert.Empty(t, errs)
	mu.Unlock()
	assert.Zero(t, info.NumAckPending)
}

func TestAPullTheServerWillAlwaysRefuseEndsRunWithErrPullRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 1)

	handled := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- natsjs.Run(ctx, newPool(t, 1), js, cons, func(context.Context, jetstream.Msg) error {
			handled <- struct{}{}
			return nil
		})
	}()
	<-handled
	// Lowered under Run: its next pulls, of 500ms, are refused.
	_, err := js.UpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxRequestExpires: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	select {
	case err := <-ran:
		require.ErrorIs(t, err, natsjs.ErrPullRefused)
		assert.Contains(t, err.Error(), "MaxRequestExpires")
	case <-time.After(waitFor):
		t.Fatal("Run went on pulling while every pull was refused")
	}
}

func TestAConsumerDeletedWhileEverySlotIsHeldEndsRun(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 2*time.Second, 0)
	publishJobs(t, js, 2)

	// Both slots held, one running, one waiting: no pull is outstanding
	// for a status to end.
	started := make(chan struct{}, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- natsjs.Run(ctx, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			started <- struct{}{}
			<-ctx.Done()
			return nil
		}, natsjs.WithMaxInFlight(2), natsjs.WithAhead(1))
	}()
	recv(t, started, "the handler")
	eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == 2 }, "did not take both jobs")
	require.NoError(t, js.DeleteConsumer(context.Background(), "JOBS", "workers"))
	select {
	case err := <-ran:
		require.Error(t, err)
		assert.True(t, errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound), "%v", err)
	case <-time.After(waitFor):
		t.Fatal("Run went on after its consumer was deleted")
	}
	assert.Len(t, started, 0, "the waiting job started after the consumer was deleted")
}

func TestADeletedConsumerEndsRunWithAnError(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 2)

	started := make(chan struct{}, 2)
	var handlerCtxDone atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		// One worker: the second job waits for it; a pull for a third
		// is outstanding.
		consumed <- natsjs.Run(ctx, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			started <- struct{}{}
			<-ctx.Done()
			handlerCtxDone.Store(true)
			return nil
		}, natsjs.WithAhead(2))
	}()
	recv(t, started, "the handler")
	eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == 2 }, "did not take both jobs")
	require.NoError(t, js.DeleteConsumer(context.Background(), "JOBS", "workers"))
	select {
	case err := <-consumed:
		require.Error(t, err)
		assert.True(t, errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound), "%v", err)
		assert.Contains(t, err.Error(), "natsjs: ")
	case <-time.After(waitFor):
		t.Fatal("Run went on after its consumer was deleted")
	}
	assert.True(t, handlerCtxDone.Load())
	assert.Len(t, started, 0, "the waiting job started after the consumer was deleted")
}

// A consumer deleted while the stop's grace period runs went unnoticed:
// the read of the consumer used the stop's ctx, already cancelled, and the
// handlers kept their ctx for the whole grace period, for work that could
// no longer be acked.
func TestAConsumerDeletedDuringTheGracePeriodEndsItAtOnce(t *testing.T) {
	t.Parallel()
	const grace = 30 * time.Second
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 1)

	started := make(chan struct{})
	lostCtx := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- natsjs.Run(ctx, newPool(t, 1), js, cons, func(hctx context.Context, msg jetstream.Msg) error {
			close(started)
			<-hctx.Done()
			close(lostCtx)
			return hctx.Err()
		}, natsjs.WithGracePeriod(grace))
	}()
	recv(t, started, "the handler")
	cancel() // the grace period begins
	// No pull is left waiting, whose end (409 Consumer Deleted) would say
	// it: only reading the consumer can tell.
	eventually(t, func() bool { return consumerInfo(t, cons).NumWaiting == 0 }, "the stop left pulls waiting")
	require.NoError(t, js.DeleteConsumer(context.Background(), "JOBS", "workers"))
	deleted := time.Now()
	select {
	case <-lostCtx:
		// Read every second: generous for a loaded machine, far below
		// the grace period.
		assert.Less(t, time.Since(deleted), 10*time.Second)
	case <-time.After(grace):
		t.Fatal("the handler kept its ctx for the grace period after its consumer was deleted")
	}
	err := recv(t, ran, "Run")
	require.Error(t, err)
	assert.True(t, errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted), "%v", err)
}
