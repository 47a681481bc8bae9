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

func TestStopWaitRunsEverythingQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		var ran atomic.Int64
		for range 100 {
			require.NoError(t, p.Submit(func() { time.Sleep(time.Millisecond); ran.Add(1) }))
		}
		p.StopWait()
		assert.Equal(t, int64(100), ran.Load())
		s := p.Status()
		assert.Equal(t, workerpool.Stopped, s.State)
		assert.Zero(t, s.Workers)
		assertBalanced(t, s)
	})
}

func TestStopReturnsNeverStartedTasksInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		var ran []int
		waitErrs := make(chan error, 2)
		for i := range 6 {
			if i == 2 || i == 4 {
				go func() { waitErrs <- p.SubmitWait(func() { t.Error("dropped SubmitWait task ran") }) }()
				synctest.Wait()
				continue
			}
			require.NoError(t, p.Submit(func() { ran = append(ran, i) }))
		}

		stopped := make(chan []func())
		go func() { stopped <- p.Stop() }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("Stop returned while a task was still running")
		default:
		}
		release()
		tasks := <-stopped

		for range 2 {
			assert.ErrorIs(t, <-waitErrs, workerpool.ErrStopped, "a dropped SubmitWait task's caller gets ErrStopped")
		}
		assert.Empty(t, ran, "no dropped task ran")
		require.Len(t, tasks, 4, "fire-and-forget tasks only")
		for _, task := range tasks {
			task()
		}
		assert.Equal(t, []int{0, 1, 3, 5}, ran, "in submission order")
		s := p.Status()
		assert.Equal(t, uint64(6), s.Abandoned)
		assertBalanced(t, s)
		assert.Nil(t, p.Stop(), "a later Stop gets nothing")
	})
}

func TestStopLetsRunningTasksFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(3)
		var finished atomic.Int64
		for range 3 {
			require.NoError(t, p.Submit(func() { time.Sleep(time.Second); finished.Add(1) }))
		}
		synctest.Wait()
		start := time.Now()
		assert.Empty(t, p.Stop())
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, int64(3), finished.Load())
	})
}

func TestStopLeavesNoGoroutine(t *testing.T) {
	for _, stop := range stoppers {
		t.Run(stop.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(16, workerpool.WithMinWorkers(4))
				for range 1000 {
					require.NoError(t, p.Submit(func() { time.Sleep(time.Millisecond) }))
				}
				synctest.Wait() // the last Submit returns before its worker starts
				require.Equal(t, 18, len(poolGoroutines()), "the dispatcher, its reaping clock and 16 workers")
				stop.stop(p)
				// When Stop returns, the pool's goroutines have at most
				// their deferred returns left; Wait lets them finish.
				synctest.Wait()
				assert.Zero(t, len(poolGoroutines()))
			})
		})
	}
}

func TestStopAndStopWaitAreIdempotentAndConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		for range 10 {
			require.NoError(t, p.Submit(func() {}))
		}
		var wg sync.WaitGroup
		var returned atomic.Int64
		for i := range 30 {
			wg.Go(func() {
				switch i % 3 {
				case 0:
					returned.Add(int64(len(p.Stop())))
				case 1:
					p.StopWait()
				case 2:
					tasks, _ := p.Shutdown(context.Background())
					returned.Add(int64(len(tasks)))
				}
			})
		}
		synctest.Wait()
		release()
		wg.Wait()
		s := p.Status()
		assert.Equal(t, int64(s.Abandoned), returned.Load(), "dropped tasks are returned exactly once")
		assert.Equal(t, uint64(11), s.Completed+s.Abandoned)
		p.Stop()
		p.StopWait()
	})
}

func TestStopEscalatesAStopWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		for range 3 {
			require.NoError(t, p.Submit(func() { t.Error("a task dropped by Stop ran") }))
		}
		waited := make(chan struct{})
		go func() { p.StopWait(); close(waited) }()
		synctest.Wait()
		assert.Equal(t, workerpool.Stopping, p.Status().State)

		stopped := make(chan []func())
		go func() { stopped <- p.Stop() }()
		synctest.Wait()
		release()
		assert.Len(t, <-stopped, 3)
		<-waited
	})
}

func TestStopReleasesABlockedSubmitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1)) // Block
		release := hold(t, p, 2)                             // one running, one waiting: full
		errs := make(chan error, 2)
		go func() { errs <- p.Submit(func() {}) }()
		go func() { errs <- p.SubmitWait(func() {}) }()
		synctest.Wait()
		assert.Empty(t, errs, "submitters wait for room")

		go p.Stop()
		synctest.Wait()
		assert.ErrorIs(t, <-errs, workerpool.ErrStopped)
		assert.ErrorIs(t, <-errs, workerpool.ErrStopped)
		release()
	})
}

// TestNothingIsLostWhenStopRacesSubmitters runs on the real scheduler so
// that the race detector sees real interleavings; its assertions hold for
// every interleaving.
func TestNothingIsLostWhenStopRacesSubmitters(t *testing.T) {
	const submitters, each = 16, 300
	p := workerpool.New(4, workerpool.WithMaxWaiting(64))
	var runs [submitters * each]atomic.Int32
	var accepted atomic.Uint64 // submissions that returned nil
	waitStopped := make([]bool, submitters*each)
	var wg sync.WaitGroup
	for s := range submitters {
		wg.Go(func() {
			for i := range each {
				id := s*each + i
				task := func() { runs[id].Add(1) }
				var err error
				switch i % 3 {
				case 0:
					err = p.Submit(task)
				case 1:
					err = p.SubmitWait(task)
					if err == nil {
						assert.Equal(t, int32(1), runs[id].Load(), "SubmitWait returned nil before its task ran")
					}
					waitStopped[id] = err == workerpool.ErrStopped
				case 2:
					err = p.TrySubmit(task)
				}
				switch err {
				case nil:
					accepted.Add(1)
				case workerpool.ErrStopped, workerpool.ErrQueueFull:
				default:
					t.Errorf("unexpected error %v", err)
				}
			}
		})
	}
	for p.Status().Submitted < 1000 {
		runtime.Gosched() // stop mid-stream; any point is valid
	}
	returned := p.Stop()
	wg.Wait()
	for _, task := range returned {
		task()
	}

	var ran uint64
	for id := range runs {
		n := runs[id].Load()
		require.LessOrEqual(t, n, int32(1), "task %d ran twice", id)
		if waitStopped[id] {
			assert.Zero(t, n, "a SubmitWait that got ErrStopped had its task run")
		}
		ran += uint64(n)
	}
	s := p.Status()
	droppedWaiters := s.Abandoned - uint64(len(returned))
	assert.Equal(t, s.Submitted, ran+droppedWaiters,
		"every accepted task ran, was returned by Stop, or its waiter got ErrStopped")
	assert.Equal(t, s.Submitted, accepted.Load()+droppedWaiters)
	assertBalanced(t, s)
}

func TestShutdownWithADoneCtxLosesNothingToRacingSubmitters(t *testing.T) {
	// Shutdown's deadline and its stop to accepting must reach the
	// dispatcher together: a task accepted between them was once dropped
	// by the deadline and then lost when Stop dropped the rest.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 200 {
		p := workerpool.New(1)
		var ran, accepted atomic.Int64
		task := func() { ran.Add(1) }
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for p.Submit(task) == nil {
					accepted.Add(1)
				}
			})
		}
		for ran.Load() < 3 { // let the pool get busy
			runtime.Gosched()
		}
		returned, err := p.Shutdown(done)
		wg.Wait()
		// The pool may have run every task it accepted before it saw the
		// deadline: then nothing was dropped and Shutdown returns nil, nil.
		if s := p.Status(); s.Abandoned == 0 {
			require.NoError(t, err)
			require.Nil(t, returned)
		} else {
			require.ErrorIs(t, err, context.Canceled)
		}
		require.Equal(t, accepted.Load(), ran.Load()+int64(len(returned)),
			"every accepted task ran or was returned; %+v", p.Status())
	}
}

func TestStopWaitRunsEveryTaskOfManyConcurrentSubmitters(t *testing.T) {
	// More submitters than the dispatcher takes in one wake-up: the last
	// of a burst was once received and dropped.
	for range 10 {
		p := workerpool.New(100)
		var ran atomic.Int64
		task := func() { ran.Add(1) }
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				for range 100 {
					assert.NoError(t, p.Submit(task))
				}
			})
		}
		wg.Wait()
		p.StopWait()
		require.Equal(t, int64(200*100), ran.Load())
		require.Equal(t, uint64(200*100), p.Status().Submitted)
	}
}

// A submitter that gets ErrStopped from a stopping pool finds Status past
// Running: the dispatcher records Stopping before it releases submitters.
func TestASubmitterToldErrStoppedSeesThePoolStopping(t *testing.T) {
	for i := range 2000 {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1))
		block := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-block }))
		require.NoError(t, p.Submit(func() {})) // the queue is full now
		errc := make(chan error)
		go func() { errc <- p.Submit(func() {}) }()
		go p.Stop()
		if err := <-errc; err == workerpool.ErrStopped {
			if s := p.Status().State; s == workerpool.Running || s == workerpool.Paused {
				t.Fatalf("round %d: State = %v after Submit returned ErrStopped", i, s)
			}
		}
		close(block)
		p.Stop()
	}
}

// Once Stop has returned, no submission is accepted: not even a CallerRuns
// task whose submitter learned the queue was full before the stop, and is
// about to run it. Status's Submitted never rises after Stopped. Real
// scheduler, many rounds: the window is a few instructions wide.
func TestNoTaskIsAcceptedOnceStopReturned(t *testing.T) {
	for range 200 {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
		release := hold(t, p, 2) // one runs, one waits: full
		var wg sync.WaitGroup
		var start sync.WaitGroup
		start.Add(1)
		for range 8 {
			wg.Go(func() {
				start.Wait()
				for range 20 {
					_ = p.Submit(func() {})
				}
			})
		}
		start.Done()
		release()
		p.Stop()
		after := p.Status().Submitted
		wg.Wait()
		require.Equal(t, after, p.Status().Submitted, "Submitted rose after Stop returned")
	}
}
