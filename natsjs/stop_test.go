package natsjs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// soon bounds how long a handed-back message may take to reach another
// process: far below the 30s AckWait these tests use, so that only a
// hand-back can be that quick, and far above any scheduling delay.
const soon = 10 * time.Second

func TestAGracefulStopHandsNeverStartedMessagesBackAtOnce(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		const jobs = 5
		s := startServer(t)
		_, js := connect(t, s)
		cons := workQueue(t, js, 30*time.Second, 0)
		publishJobs(t, js, jobs)

		// Process A takes every job, runs one, which ignores its ctx, and
		// keeps the others waiting in its pool.
		release := make(chan struct{})
		startedA := make(chan string, jobs)
		ta := newTally()
		stopA := consuming(t, newPool(t, 1), cons, func(ctx context.Context, msg jetstream.Msg) error {
			startedA <- string(msg.Data())
			<-release
			ta.add(msg)
			return nil
		}, via.opts(js, natsjs.WithMaxInFlight(jobs))...)
		first := <-startedA
		eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == jobs }, "A did not take every job")

		stoppedA := make(chan error, 1)
		go func() { stoppedA <- stopA() }()
		handedBack := time.Now()

		// Process B gets the four never-started jobs without waiting for
		// AckWait, while A's handler still runs.
		tb := newTally()
		stopB := consuming(t, newPool(t, 4), cons, func(ctx context.Context, msg jetstream.Msg) error {
			tb.add(msg)
			return nil
		}, via.opts(js)...)
		eventually(t, func() bool { return tb.distinct() == jobs-1 }, "B did not get the handed-back jobs")
		assert.Less(t, time.Since(handedBack), soon)
		assert.NotContains(t, tb.snapshot(), first, "B got the job A was running")
		select {
		case err := <-stoppedA:
			t.Fatalf("A's Run returned (%v) before its running handler finished", err)
		default:
		}

		close(release)
		require.NoError(t, <-stoppedA)
		assert.Equal(t, map[string]int{first: 1}, ta.snapshot())
		eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "A's last job not acked")
		require.NoError(t, stopB())
		assert.Len(t, startedA, 0, "A started a job after its stop")
	})
}

func TestAHandlerThatFailsBecauseOfTheStopHandsItsMessageBackAtOnce(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		s := startServer(t)
		_, js := connect(t, s)
		cons := workQueue(t, js, 30*time.Second, 0)
		publishJobs(t, js, 1)

		started := make(chan struct{})
		stopA := consuming(t, newPool(t, 1), cons, func(ctx context.Context, msg jetstream.Msg) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, via.opts(js, natsjs.WithBackoff(func(uint64) time.Duration { return time.Hour }))...)
		<-started
		require.NoError(t, stopA())

		got := make(chan uint64, 1)
		stopB := consuming(t, newPool(t, 1), cons, func(ctx context.Context, msg jetstream.Msg) error {
			md, err := msg.Metadata()
			require.NoError(t, err)
			got <- md.NumDelivered
			return nil
		}, via.opts(js)...)
		select {
		case n := <-got:
			assert.Equal(t, uint64(2), n)
		case <-time.After(soon):
			t.Fatal("the message interrupted by the stop did not come back at once")
		}
		require.NoError(t, stopB())
	})
}

func TestAPoolStoppedUnderRunEndsItWithErrStoppedAndHandsBackItsMessages(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		const jobs = 4
		s := startServer(t)
		_, js := connect(t, s)
		cons := workQueue(t, js, 30*time.Second, 0)
		publishJobs(t, js, jobs)

		p := workerpool.New(1)
		release := make(chan struct{})
		started := make(chan string, jobs)
		var ctxDone atomic.Bool // the running handler's ctx, once released
		ta := newTally()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		consumed := make(chan error, 1)
		go func() {
			consumed <- natsjs.Run(ctx, p, cons, func(ctx context.Context, msg jetstream.Msg) error {
				started <- string(msg.Data())
				<-release
				ctxDone.Store(ctx.Err() != nil)
				ta.add(msg)
				return nil
			}, via.opts(js, natsjs.WithMaxInFlight(jobs))...)
		}()
		first := <-started
		eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == jobs }, "did not take every job")

		dropped := make(chan []func(), 1)
		go func() { dropped <- p.Stop() }() // waits for the running handler

		tb := newTally()
		stopB := consuming(t, newPool(t, 4), cons, func(ctx context.Context, msg jetstream.Msg) error {
			tb.add(msg)
			return nil
		}, via.opts(js)...)
		eventually(t, func() bool { return tb.distinct() == jobs-1 }, "the dropped jobs were not handed back")
		close(release)
		select {
		case err := <-consumed:
			assert.ErrorIs(t, err, workerpool.ErrStopped)
		case <-time.After(waitFor):
			t.Fatal("Run did not return after its pool stopped")
		}
		// Running the tasks Stop dropped, after the hand-back, does nothing.
		for _, task := range <-dropped {
			task()
		}
		assert.Equal(t, map[string]int{first: 1}, ta.snapshot())
		// The hand-back B saw comes after the stop: the handler's ctx was done.
		assert.True(t, ctxDone.Load(), "the handler's ctx was not done after its pool stopped")
		assert.Len(t, started, 0)
		eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
		require.NoError(t, stopB())
	})
}

func TestRunOnAStoppedPoolReturnsErrStoppedAndTakesNothing(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		s := startServer(t)
		_, js := connect(t, s)
		cons := workQueue(t, js, 30*time.Second, 0)
		publishJobs(t, js, 3)
		p := workerpool.New(2)
		p.StopWait()

		err := natsjs.Run(context.Background(), p, cons, func(context.Context, jetstream.Msg) error {
			t.Error("a handler ran on a stopped pool")
			return nil
		}, via.opts(js)...)
		assert.ErrorIs(t, err, workerpool.ErrStopped)
		requireTookNothing(t, cons, 3)
	})
}

func TestRunWithADoneContextReturnsNilAndTakesNothing(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		s := startServer(t)
		_, js := connect(t, s)
		cons := workQueue(t, js, 30*time.Second, 0)
		publishJobs(t, js, 3)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()

		err := natsjs.Run(ctx, newPool(t, 2), cons, func(context.Context, jetstream.Msg) error {
			t.Error("a handler ran after ctx was done")
			return nil
		}, via.opts(js)...)
		assert.NoError(t, err)
		requireTookNothing(t, cons, 3)
	})
}

// requireTookNothing checks that the server delivered none of the n
// messages published to cons, which are all still pending. The server
// counts a consumer's pending messages some time after it stored them.
func requireTookNothing(t *testing.T, cons jetstream.Consumer, n int) {
	t.Helper()
	info := consumerInfo(t, cons)
	assert.Zero(t, info.Delivered.Consumer, "a message was delivered")
	assert.Zero(t, info.NumAckPending)
	eventually(t, func() bool { return consumerInfo(t, cons).NumPending == uint64(n) }, "messages not pending")
}

func TestADeletedConsumerEndsRunWithAnError(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
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
			// One worker: the second job waits in the pool; a third slot
			// keeps a pull outstanding.
			consumed <- natsjs.Run(ctx, newPool(t, 1), cons, func(ctx context.Context, msg jetstream.Msg) error {
				started <- struct{}{}
				<-ctx.Done()
				handlerCtxDone.Store(true)
				return nil
			}, via.opts(js, natsjs.WithMaxInFlight(3))...)
		}()
		<-started
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
	})
}

func TestNoHandlerStartsOnceRunsContextIsDone(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		const jobs = 10
		s := startServer(t)
		_, js := connect(t, s)
		cons := workQueue(t, js, 30*time.Second, 0)
		publishJobs(t, js, jobs)

		// One worker, every job held: the first handler cancels Run's ctx
		// and returns, freeing the worker while nine messages wait for it.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var started atomic.Int32
		err := natsjs.Run(ctx, newPool(t, 1), cons, func(hctx context.Context, msg jetstream.Msg) error {
			if started.Add(1) > 1 {
				t.Errorf("handler of job %s started after ctx was done (ctx: %v)", msg.Data(), ctx.Err())
				return nil
			}
			eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == jobs }, "did not take every job")
			cancel()
			assert.Error(t, hctx.Err(), "the handler's ctx is not done once Run's is")
			return nil
		}, via.opts(js, natsjs.WithMaxInFlight(jobs))...)
		require.NoError(t, err)
		assert.Equal(t, int32(1), started.Load())
		assert.Equal(t, uint64(jobs-1), streamMsgs(t, js, "JOBS"), "the handled job was not acked")

		// The nine never started were handed back: another process gets them.
		handedBack := time.Now()
		tb := newTally()
		stopB := consuming(t, newPool(t, 4), cons, func(ctx context.Context, msg jetstream.Msg) error {
			tb.add(msg)
			return nil
		}, via.opts(js)...)
		eventually(t, func() bool { return tb.distinct() == jobs-1 }, "the waiting jobs were not handed back")
		assert.Less(t, time.Since(handedBack), soon)
		require.NoError(t, stopB())
	})
}
