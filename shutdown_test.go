package workerpool_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// cancelled returns a context that is already done.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestShutdownWithADoneCtxStartsNoQueuedTask(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(p *workerpool.Pool) (release func())
	}{
		{"paused pool", func(p *workerpool.Pool) func() {
			p.Pause(context.Background()) // Shutdown ends it
			return func() {}
		}},
		{"every worker busy", func(p *workerpool.Pool) func() {
			block := make(chan struct{})
			for range 4 {
				require.NoError(t, p.Submit(func() { <-block }))
			}
			return func() { close(block) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(4)
				release := tc.setup(p)
				var ran atomic.Int64
				for range 10 {
					require.NoError(t, p.Submit(func() { ran.Add(1) }))
				}
				synctest.Wait()
				require.Equal(t, 10, p.WaitingQueueSize())

				type result struct {
					tasks []func()
					err   error
				}
				done := make(chan result)
				go func() {
					tasks, err := p.Shutdown(cancelled())
					done <- result{tasks, err}
				}()
				synctest.Wait()
				release()
				r := <-done
				assert.ErrorIs(t, r.err, context.Canceled)
				assert.Len(t, r.tasks, 10, "every queued task comes back")
				assert.Zero(t, ran.Load(), "no queued task started")
				assert.Equal(t, uint64(10), p.Status().Abandoned)
			})
		})
	}
}

func TestShutdownReturnsNilNilWhenNoTaskWasDropped(t *testing.T) {
	t.Run("idle pool, done ctx", func(t *testing.T) {
		for range 200 { // the rule holds on every run, not most
			p := workerpool.New(4)
			require.NoError(t, p.SubmitWait(func() {}))
			tasks, err := p.Shutdown(cancelled())
			require.NoError(t, err, "nothing was dropped")
			require.Nil(t, tasks)
		}
	})
	t.Run("a running task outlives ctx, nothing queued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(1)
			require.NoError(t, p.Submit(func() { time.Sleep(2 * time.Second) }))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			tasks, err := p.Shutdown(ctx)
			assert.NoError(t, err, "every accepted task ran")
			assert.Nil(t, tasks)
			assert.Equal(t, 2*time.Second, time.Since(start), "Shutdown waits for running tasks")
		})
	})
}

func TestShutdownReturnsCtxErrWhenItDroppedATask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		waitErr := make(chan error)
		go func() { waitErr <- p.SubmitWait(func() { t.Error("a dropped task ran") }) }()
		synctest.Wait()
		tasks, err := p.Shutdown(cancelled())
		assert.ErrorIs(t, err, context.Canceled, "a dropped SubmitWait task counts as dropped")
		assert.Empty(t, tasks, "SubmitWait tasks are not returned")
		assert.ErrorIs(t, <-waitErr, workerpool.ErrStopped)
	})
}

// TestStopAndShutdownsRacingSubmittersLoseNothing stops a busy pool with a
// Stop and three Shutdowns at once, with deadlines that pass at different
// times, on the real scheduler. Every accepted task ran, or came back to
// exactly one of the calls, or its SubmitWait caller got ErrStopped; each
// Shutdown's error follows the documented rule.
func TestStopAndShutdownsRacingSubmittersLoseNothing(t *testing.T) {
	for range 50 {
		p := workerpool.New(2, workerpool.WithMaxWaiting(32))
		var ran, accepted, waitStopped atomic.Int64
		task := func() { ran.Add(1) }
		var submitters sync.WaitGroup
		for i := range 4 {
			submitters.Go(func() {
				for {
					var err error
					if i == 0 {
						err = p.SubmitWait(task)
						if err == workerpool.ErrStopped {
							waitStopped.Add(1)
						}
					} else {
						err = p.Submit(task)
					}
					if err != nil {
						return
					}
					accepted.Add(1)
				}
			})
		}
		for ran.Load() < 100 {
			runtime.Gosched()
		}
		type result struct {
			tasks []func()
			err   error
			d     time.Duration // Shutdown's deadline; -1 for Stop
		}
		results := make(chan result, 4)
		var stoppers sync.WaitGroup
		stoppers.Go(func() { results <- result{tasks: p.Stop(), d: -1} })
		for _, d := range []time.Duration{0, 50 * time.Microsecond, time.Hour} {
			stoppers.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				tasks, err := p.Shutdown(ctx)
				results <- result{tasks, err, d}
			})
		}
		stoppers.Wait()
		submitters.Wait()
		close(results)

		s := p.Status()
		var returned, lists int
		for r := range results {
			if len(r.tasks) > 0 {
				lists++
			}
			returned += len(r.tasks)
			for _, task := range r.tasks {
				task()
			}
			switch {
			case r.d < 0: // Stop
			case s.Abandoned == 0:
				require.NoError(t, r.err, "nothing was dropped")
			case r.d == 0: // done before the call
				require.ErrorIs(t, r.err, context.DeadlineExceeded)
			case r.d == time.Hour: // not done: another call dropped them
				require.ErrorIs(t, r.err, workerpool.ErrStopped)
			default: // either, depending on when it looked
				if r.err != workerpool.ErrStopped {
					require.ErrorIs(t, r.err, context.DeadlineExceeded)
				}
			}
		}
		require.LessOrEqual(t, lists, 1, "the dropped tasks come back once")
		require.Equal(t, accepted.Load(), ran.Load(),
			"every task accepted without a dropped waiter ran once (returned ones ran above)")
		droppedWaiters := s.Submitted - uint64(accepted.Load())
		require.LessOrEqual(t, droppedWaiters, uint64(waitStopped.Load()))
		require.Equal(t, s.Abandoned, uint64(returned)+droppedWaiters)
	}
}

func TestAShutdownWhoseCtxIsDoneEndsAStopWaitEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		for range 5 {
			require.NoError(t, p.Submit(func() { t.Error("a dropped task ran") }))
		}
		start := time.Now()
		waited := make(chan time.Duration)
		go func() { p.StopWait(); waited <- time.Since(start) }()
		synctest.Wait()
		tasks, err := p.Shutdown(cancelled())
		assert.ErrorIs(t, err, context.Canceled)
		assert.Len(t, tasks, 5)
		assert.Equal(t, time.Second, <-waited, "StopWait returned with the running task")
	})
}

func TestShutdownReturnsNilWhenEverythingRanInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		var ran atomic.Int64
		for range 5 {
			require.NoError(t, p.Submit(func() { time.Sleep(time.Second); ran.Add(1) }))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tasks, err := p.Shutdown(ctx)
		assert.NoError(t, err)
		assert.Nil(t, tasks)
		assert.Equal(t, int64(5), ran.Load())
	})
}

func TestShutdownPastItsDeadlineActsAsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		var ran atomic.Int64
		for range 5 {
			require.NoError(t, p.Submit(func() { time.Sleep(2 * time.Second); ran.Add(1) }))
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		tasks, err := p.Shutdown(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		// At 3s the second task is running: Shutdown waits for it and
		// returns the three that never started.
		assert.Equal(t, 4*time.Second, time.Since(start))
		assert.Equal(t, int64(2), ran.Load())
		assert.Len(t, tasks, 3)
		assert.Equal(t, uint64(3), p.Status().Abandoned)
	})
}

func TestShutdownStartsNoQueuedTaskAfterItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// The running task ends exactly at the deadline, racing Shutdown's
		// Stop; the queued ones must not start.
		require.NoError(t, p.Submit(func() { <-ctx.Done() }))
		for range 2 {
			require.NoError(t, p.Submit(func() { t.Error("a task started after the deadline") }))
		}
		start := time.Now()
		tasks, err := p.Shutdown(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Len(t, tasks, 2)
		assert.Equal(t, time.Second, time.Since(start))
	})
}
