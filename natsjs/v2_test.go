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
	<-started
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

func TestRunOnASubpoolKeepsItsLimitAndTheRestOfThePoolFree(t *testing.T) {
	t.Parallel()
	const jobs, limit = 20, 2
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	p := newPool(t, 8)
	sub := p.Subpool("jobs", limit)
	release := make(chan struct{})
	var running, peak atomic.Int32
	ta := newTally()
	stop := consuming(t, sub, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		n := running.Add(1)
		defer running.Add(-1)
		for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
		}
		<-release
		ta.add(msg)
		return nil
	}, natsjs.WithAhead(1))
	// Run uses the sub-pool's limit, not the pool's size.
	eventually(t, func() bool {
		return running.Load() == limit && consumerInfo(t, cons).NumAckPending == 2*limit
	}, "the sub-pool did not fill its limit and bound")
	// The pool's other workers stay free for other work meanwhile.
	require.NoError(t, p.SubmitWait(func() {}))
	for range 10 {
		assert.LessOrEqual(t, consumerInfo(t, cons).NumAckPending, 2*limit)
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stop())
	requireEachOnce(t, ta, jobs)
	assert.Equal(t, int32(limit), peak.Load(), "more handlers ran at once than the sub-pool's limit")
}

func TestTheErrorHandlerIsToldOfADeadLetterThatCannotBePublished(t *testing.T) {
	t.Parallel() // waits on the clock, not the CPU
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 1)
	publishJobs(t, js, 1)

	got := make(chan error, 10)
	// No stream captures nowhere.dead: the copy cannot be stored.
	stop := consuming(t, newPool(t, 1), js, cons, func(context.Context, jetstream.Msg) error {
		return errors.New("boom")
	}, natsjs.WithDeadLetter(js, "nowhere.dead"), natsjs.WithErrorHandler(func(err error) { got <- err }),
		natsjs.WithSettleTimeout(300*time.Millisecond))

	var err error
	select {
	case err = <-got:
	case <-time.After(waitFor):
		t.Fatal("the error handler was not told")
	}
	require.NoError(t, stop())
	var me *natsjs.MessageError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "dead-letter", me.Op)
	assert.Equal(t, "JOBS", me.Stream)
	assert.Equal(t, uint64(1), me.Sequence)
	assert.Contains(t, err.Error(), "JOBS/1")
	assert.Equal(t, uint64(1), streamMsgs(t, js, "JOBS"), "the message was lost")
}

func TestAProgressMessageNeverUndoesTheDelayOfANak(t *testing.T) {
	t.Parallel()
	const jobs = 200
	s := startServer(t)
	_, js := connect(t, s)
	// AckWait 30s, backoff 200ms: a progress message sent after the Nak
	// would make a message come back after 30s rather than 200ms.
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	ta := newTally()
	// Progress every millisecond, for every held message: it races
	// every Nak.
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		require.NoError(t, err)
		if md.NumDelivered == 1 {
			time.Sleep(time.Millisecond)
			return errors.New("first delivery fails")
		}
		ta.add(msg)
		return nil
	}, natsjs.WithProgressInterval(time.Millisecond), natsjs.WithMaxInFlight(jobs),
		natsjs.WithBackoff(func(uint64) time.Duration { return 200 * time.Millisecond }))

	// Far below AckWait: only the Naks' delays can bring them all back.
	require.Eventually(t, func() bool { return ta.distinct() == jobs }, 10*time.Second, 5*time.Millisecond,
		"a failed message came back after AckWait, not its backoff")
	require.NoError(t, stop())
	requireEachOnce(t, ta, jobs)
}

func TestAMessageHeldLongerThanTheConsumersBackOffIsNotRedelivered(t *testing.T) {
	t.Parallel() // waits on the clock, not the CPU
	s := startServer(t)
	_, js := connect(t, s)
	workQueue(t, js, 30*time.Second, 0)
	require.NoError(t, js.DeleteConsumer(context.Background(), "JOBS", "workers"))
	// BackOff replaces AckWait: the server takes its first value as the
	// AckWait, and redelivers an unacked second delivery after the second,
	// 600ms. v1 sent progress every AckWait/3 = 1s.
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "backoff", AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: 4, BackOff: []time.Duration{3 * time.Second, 600 * time.Millisecond, 600 * time.Millisecond},
	})
	require.NoError(t, err)
	publishJobs(t, js, 1)

	var mu sync.Mutex
	var deliveries []uint64
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		require.NoError(t, err)
		mu.Lock()
		deliveries = append(deliveries, md.NumDelivered)
		mu.Unlock()
		if md.NumDelivered == 1 {
			return errors.New("first delivery fails")
		}
		// The second delivery, whose redelivery delay is 600ms, runs for
		// 2s: the default progress interval must be below 600ms.
		time.Sleep(2 * time.Second)
		return nil
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }))
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []uint64{1, 2}, deliveries, "a held message was redelivered")
}
