package workerpool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests of submitting: each way to submit, the bound on waiting tasks
// and its overflow policies, nil tasks, a stopped pool, and what a
// submission allocates.

func TestNilTaskIsRejected(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.ErrorIs(t, p.Submit(nil), workerpool.ErrNilTask)
	assert.ErrorIs(t, p.SubmitContext(context.Background(), nil), workerpool.ErrNilTask)
	assert.ErrorIs(t, p.TrySubmit(nil), workerpool.ErrNilTask)
	assert.ErrorIs(t, p.SubmitWait(nil), workerpool.ErrNilTask)
	assert.Zero(t, p.Status().Submitted)
}

func TestEverySubmitMethodFailsAfterStop(t *testing.T) {
	for _, stop := range stoppers {
		t.Run(stop.name, func(t *testing.T) {
			p := workerpool.New(2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
			stop.stop(p)
			ran := false
			task := func() { ran = true }
			assert.True(t, p.Stopped())
			assert.ErrorIs(t, p.Submit(task), workerpool.ErrStopped)
			assert.ErrorIs(t, p.SubmitContext(context.Background(), task), workerpool.ErrStopped)
			assert.ErrorIs(t, p.TrySubmit(task), workerpool.ErrStopped)
			assert.ErrorIs(t, p.SubmitWait(task), workerpool.ErrStopped)
			assert.False(t, ran, "no task runs after stop, not even in the caller")
			assert.Equal(t, workerpool.Stopped, p.Status().State)
		})
	}
}

func TestSubmitWaitReturnsAfterTheTask(t *testing.T) {
	p := workerpool.New(2)
	defer p.Stop()
	x := 0
	require.NoError(t, p.SubmitWait(func() { x = 42 }))
	assert.Equal(t, 42, x, "the task's writes happen before SubmitWait returns") // -race checks it too
}

func TestSubmitOfAPreparedFuncAllocatesNothing(t *testing.T) {
	for _, n := range []int{1, 64} { // through the queue, and straight to workers
		p := workerpool.New(n)
		task := func() {}
		allocs := testing.AllocsPerRun(10000, func() { _ = p.Submit(task) })
		p.StopWait()
		assert.Zero(t, allocs, "max %d workers", n)
	}
}

func TestSubmitWaitAllocatesOneWaiter(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	task := func() {}
	assert.Equal(t, 1.0, testing.AllocsPerRun(10000, func() { _ = p.SubmitWait(task) }))
}

func TestSubmitKeyAllocatesNothingOnceWarm(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	task := func() {}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	run := func(pick func(i int) string) float64 {
		i := 0
		return testing.AllocsPerRun(10000, func() {
			_ = p.SubmitKey(pick(i), task)
			i++
		})
	}
	run(func(i int) string { return keys[i%len(keys)] }) // warm up
	assert.Zero(t, run(func(i int) string { return keys[i%len(keys)] }), "many distinct keys")
	assert.Zero(t, run(func(i int) string { return keys[i%3] }), "a few hot keys")
}

// ---------------------------------------------------------------------------
// A bounded queue and its overflow policies.

// full returns a pool of one worker whose queue of one is full.
func full(t *testing.T, opts ...workerpool.Option) (p *workerpool.Pool, release func()) {
	t.Helper()
	p = workerpool.New(1, append([]workerpool.Option{workerpool.WithMaxWaiting(1)}, opts...)...)
	release = hold(t, p, 2)
	synctest.Wait()
	require.Equal(t, 1, p.WaitingQueueSize())
	return p, release
}

func TestBlockOverflowWaitsForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, release := full(t) // Block is the default
		ran := make(chan struct{})
		errs := make(chan error, 1)
		go func() { errs <- p.Submit(func() { close(ran) }) }()
		synctest.Wait()
		assert.Empty(t, errs, "Submit waits while the queue is full")
		assert.Equal(t, 1, p.WaitingQueueSize(), "the bound holds")

		release()
		assert.NoError(t, <-errs)
		<-ran
		p.StopWait()
		assert.Equal(t, 1, p.Status().PeakWaiting)
		assert.Zero(t, p.Status().Rejected)
	})
}

func TestRejectOverflowReturnsErrQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, release := full(t, workerpool.WithOverflow(workerpool.Reject))
		task := func() { t.Error("a rejected task ran") }
		assert.ErrorIs(t, p.Submit(task), workerpool.ErrQueueFull)
		assert.ErrorIs(t, p.SubmitWait(task), workerpool.ErrQueueFull)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		assert.ErrorIs(t, p.SubmitContext(ctx, task), workerpool.ErrQueueFull)
		s := p.Status()
		assert.Equal(t, uint64(3), s.Rejected)
		assert.Equal(t, uint64(2), s.Submitted, "rejected tasks are not counted as submitted")
		release()
		p.StopWait()
		assertBalanced(t, p.Status())
	})
}

func TestCallerRunsOverflowRunsTheTaskInTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, release := full(t, workerpool.WithOverflow(workerpool.CallerRuns), workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
		ran := false
		require.NoError(t, p.Submit(func() { ran = true }))
		assert.True(t, ran, "the task ran before Submit returned")

		err := p.SubmitWait(func() { panic("boom") })
		assert.ErrorAs(t, err, new(*workerpool.PanicError), "SubmitWait reports a caller-run panic")

		s := p.Status()
		assert.Equal(t, uint64(4), s.Submitted, "caller-run tasks are accepted")
		assert.Equal(t, uint64(2), s.Completed)
		assert.Equal(t, uint64(1), s.Panicked)
		assert.Zero(t, s.Rejected)
		release()
		p.StopWait()
		assertBalanced(t, p.Status())
	})
}

func TestAKeyedTaskNeverRunsInItsSubmitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
		block := make(chan struct{})
		require.NoError(t, p.SubmitKey("k", func() { <-block }))
		require.NoError(t, p.SubmitKey("k", func() {})) // waits for k: the queue is full
		returned := make(chan error)
		go func() { returned <- p.SubmitKey("k", func() {}) }()
		synctest.Wait()
		select {
		case <-returned:
			t.Fatal("a keyed task ran in its submitter, or was refused")
		default:
		}
		close(block)
		assert.NoError(t, <-returned, "it waited for room instead")
		p.StopWait()
		assert.Equal(t, uint64(3), p.Status().Completed)
	})
}

// A sub-pool's task never runs in its submitter, so its limit holds under
// CallerRuns: with its one place taken and the queue full, the next
// submission waits for room rather than run beside the first (the review's
// case: limit 1, WithMaxWaiting(1)).
func TestASubpoolsLimitHoldsUnderCallerRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
		defer p.StopWait()
		s := p.Subpool("s", 1)
		var running, most atomic.Int32
		block := make(chan struct{})
		task := func() {
			most.Store(max(most.Load(), running.Add(1)))
			<-block
			running.Add(-1)
		}
		require.NoError(t, s.Submit(task)) // runs
		require.NoError(t, s.Submit(task)) // waits: the queue is full
		synctest.Wait()
		submitted := make(chan error)
		go func() { submitted <- s.Submit(task) }()
		synctest.Wait()
		assert.Equal(t, int32(1), running.Load(), "one of the sub-pool's tasks runs")
		select {
		case err := <-submitted:
			t.Fatalf("the third submission returned %v while the queue was full", err)
		default: // it waits for room
		}
		close(block)
		require.NoError(t, <-submitted)
		synctest.Wait()
		assert.Equal(t, int32(1), most.Load(), "never more than the sub-pool's limit at once")
		assert.Equal(t, uint64(3), s.Status().Completed)
	})
}

func TestTrySubmitNeverWaitsForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, release := full(t) // Block policy: TrySubmit rejects anyway
		assert.ErrorIs(t, p.TrySubmit(func() {}), workerpool.ErrQueueFull)
		release()
		synctest.Wait()
		assert.NoError(t, p.TrySubmit(func() {}), "accepted once there is room")
		p.StopWait()

		u := workerpool.New(1) // unbounded: always room
		release = hold(t, u, 1)
		assert.NoError(t, u.TrySubmit(func() {}))
		synctest.Wait()
		assert.Equal(t, 1, u.WaitingQueueSize())
		release()
		u.StopWait()
	})
}

func TestSubmitContextGivesUpWhenCtxIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, release := full(t)
		defer func() { release(); p.StopWait() }()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := p.SubmitContext(ctx, func() { t.Error("a task given up on ran") })
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))

		assert.ErrorIs(t, p.SubmitContext(ctx, func() {}), context.DeadlineExceeded, "a done ctx fails at once")
		assert.Equal(t, uint64(2), p.Status().Submitted, "neither was accepted")
	})
}

func TestSubmitContextWithADoneCtxFailsEvenWithRoom(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, p.SubmitContext(ctx, func() {}), context.Canceled)
	assert.NoError(t, p.SubmitContext(context.Background(), func() {}))
	p.Stop()
	assert.ErrorIs(t, p.SubmitContext(ctx, func() {}), workerpool.ErrStopped, "a stopped pool says so, whatever the ctx")
}

// SubmitCtx with a nil context panics at once with a message that names
// it, even for a nil task, rather than with a nil dereference; the pool
// accepts nothing.
func TestSubmitContextWithANilContextPanicsNamingIt(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	for _, fn := range []func(){func() {}, nil} {
		assert.PanicsWithValue(t, "workerpool: SubmitContext: nil context", func() {
			_ = p.SubmitContext(nil, fn) //nolint:staticcheck // the nil context is the point
		})
	}
	assert.Zero(t, p.Status().Submitted)
}
