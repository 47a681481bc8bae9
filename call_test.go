package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

func TestCallReturnsFnsResult(t *testing.T) {
	p := workerpool.New(2)
	defer p.Stop()
	n, err := workerpool.Call(context.Background(), p, func(context.Context) (int, error) { return 42, nil })
	assert.NoError(t, err)
	assert.Equal(t, 42, n)
	boom := errors.New("boom")
	_, err = workerpool.Call(context.Background(), p, func(context.Context) (int, error) { return 0, boom })
	assert.ErrorIs(t, err, boom)
	_, err = workerpool.Call(context.Background(), p, func(context.Context) (int, error) { panic("oops") })
	var pe *workerpool.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "oops", pe.Value)
	_, err = workerpool.Call[int](context.Background(), p, nil)
	assert.ErrorIs(t, err, workerpool.ErrNilTask)
	p.Stop()
	_, err = workerpool.Call(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	assert.ErrorIs(t, err, workerpool.ErrStopped)
}

// A Call whose ctx ends while it waits behind a busy worker returns at
// once, its fn never runs, and it leaves the queue: Waiting drops, a
// bounded queue has room again, and Status counts it Canceled.
func TestACallWhoseCtxEndsWhileItWaitsNeverRunsAndLeavesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1))
		block := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-block }))
		ctx, cancel := context.WithCancel(context.Background())
		var ran atomic.Bool
		errs := make(chan error, 1)
		go func() {
			_, err := workerpool.Call(ctx, p, func(context.Context) (int, error) { ran.Store(true); return 1, nil })
			errs <- err
		}()
		synctest.Wait()
		require.Equal(t, 1, p.Status().Waiting)
		assert.ErrorIs(t, p.TrySubmit(func() {}), workerpool.ErrQueueFull, "the Call's task fills the queue")

		cancel()
		synctest.Wait()
		assert.ErrorIs(t, <-errs, context.Canceled)
		s := p.Status()
		assert.Zero(t, s.Waiting, "the Call left the queue")
		assert.Equal(t, uint64(1), s.Canceled)
		assert.NoError(t, p.TrySubmit(func() {}), "the queue has room again")

		close(block)
		p.StopWait()
		assert.False(t, ran.Load(), "fn never ran")
		s = p.Status()
		assert.Equal(t, uint64(3), s.Submitted)
		assert.Equal(t, uint64(2), s.Completed)
		assert.Equal(t, uint64(1), s.Canceled)
		assert.Equal(t, s.Submitted, s.Completed+s.Abandoned+s.Canceled, "it balances")
	})
}

// A Call whose ctx ends while fn runs returns ctx.Err() at once; fn sees
// its ctx done, and the worker counts as Busy until fn returns.
func TestACallWhoseCtxEndsWhileItRunsReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		defer p.StopWait()
		ctx, cancel := context.WithCancel(context.Background())
		started, release := make(chan struct{}), make(chan struct{})
		var sawDone atomic.Bool
		errs := make(chan error, 1)
		go func() {
			_, err := workerpool.Call(ctx, p, func(ctx context.Context) (int, error) {
				close(started)
				<-ctx.Done()
				sawDone.Store(true)
				<-release // fn takes its time to wind down
				return 1, nil
			})
			errs <- err
		}()
		<-started
		cancel()
		assert.ErrorIs(t, <-errs, context.Canceled, "Call returned before fn did")
		synctest.Wait()
		assert.True(t, sawDone.Load(), "fn's ctx is done")
		assert.Equal(t, 1, p.Status().Busy, "the worker is busy until fn returns")
		close(release)
		synctest.Wait()
		s := p.Status()
		assert.Zero(t, s.Busy)
		assert.Equal(t, uint64(1), s.Completed)
		assert.Zero(t, s.Canceled, "it started: not canceled")
	})
}

// A Call whose ctx ends as its fn is about to start, on the real
// scheduler: whatever the interleaving, fn runs at most once, Call
// returns fn's result only if fn ran, and at rest the counts balance.
func TestACallWhoseCtxEndsAsItStartsRunsAtMostOnce(t *testing.T) {
	p := workerpool.New(2)
	const calls = 2000
	var ran [calls]atomic.Int32
	var gotResult, gotErr atomic.Int32
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			if i%2 == 0 {
				go cancel()
			}
			n, err := workerpool.Call(ctx, p, func(context.Context) (int, error) { ran[i].Add(1); return i, nil })
			cancel()
			switch {
			case err == nil:
				assert.Equal(t, i, n)
				assert.Equal(t, int32(1), ran[i].Load(), "a result without a run")
				gotResult.Add(1)
			default:
				assert.ErrorIs(t, err, context.Canceled)
				gotErr.Add(1)
			}
		})
	}
	wg.Wait()
	p.StopWait()
	var runs int32
	for i := range ran {
		require.LessOrEqual(t, ran[i].Load(), int32(1), "call %d ran twice", i)
		runs += ran[i].Load()
	}
	s := p.Status()
	t.Logf("%d results, %d canceled calls, %d runs; Status %+v", gotResult.Load(), gotErr.Load(), runs, s)
	assert.LessOrEqual(t, gotResult.Load(), runs, "a result without a run")
	assert.Equal(t, uint64(runs), s.Completed)
	assert.Equal(t, s.Submitted, s.Completed+s.Canceled, "every Call ran or was canceled")
}

// Thousands of Calls race Stop: each returns fn's result, having run once,
// or ErrStopped, never having run; none runs twice and none is lost.
func TestCallsRacingStopLoseNothing(t *testing.T) {
	for range 10 {
		p := workerpool.New(4, workerpool.WithMaxWaiting(64))
		const calls = 1000
		var ran [calls]atomic.Int32
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				n, err := workerpool.Call(context.Background(), p, func(context.Context) (int, error) {
					ran[i].Add(1)
					return i, nil
				})
				switch {
				case err == nil:
					assert.Equal(t, i, n)
					assert.Equal(t, int32(1), ran[i].Load())
				default:
					assert.ErrorIs(t, err, workerpool.ErrStopped)
					assert.Zero(t, ran[i].Load(), "a Call told ErrStopped ran")
				}
			})
		}
		time.Sleep(time.Millisecond)
		assert.Empty(t, p.Stop(), "a Call's task is never returned by Stop")
		wg.Wait()
		for i := range ran {
			require.LessOrEqual(t, ran[i].Load(), int32(1))
		}
		s := p.Status()
		assert.Equal(t, s.Submitted, s.Completed+s.Abandoned+s.Canceled)
	}
}

// A Call on a sub-pool counts against the sub-pool's limit.
func TestACallOnASubpoolKeepsItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.StopWait()
		s := p.Subpool("s", 1)
		var running, most atomic.Int32
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				_, err := workerpool.Call(context.Background(), s, func(context.Context) (int, error) {
					most.Store(max(most.Load(), running.Add(1)))
					time.Sleep(time.Second)
					running.Add(-1)
					return 0, nil
				})
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), most.Load())
		assert.Equal(t, uint64(6), s.Status().Completed)
	})
}

// ExampleCall gives up on a slow task: Call returns when its context is
// done, and the task's own context tells it to stop.
func ExampleCall() {
	p := workerpool.New(1)
	defer p.StopWait()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	answer, err := workerpool.Call(ctx, p, func(ctx context.Context) (string, error) {
		select {
		case <-time.After(time.Hour): // a slow backend
			return "late", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	fmt.Printf("%q %v\n", answer, err)
	// Output: "" context deadline exceeded
}
