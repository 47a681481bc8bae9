package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests of the pool's shutdown: Stop, StopWait and Shutdown end the pool
// as they promise, lose no task, leave no caller blocked and no goroutine
// behind.

// stoppers are the three ways to stop a pool, for promises that hold for each.
var stoppers = []struct {
	name string
	stop func(*workerpool.Pool)
}{
	{"Stop", func(p *workerpool.Pool) { p.Stop() }},
	{"StopWait", (*workerpool.Pool).StopWait},
	{"Shutdown", func(p *workerpool.Pool) { _, _ = p.Shutdown(context.Background()) }},
}

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

// TestNewAndStopAThousandTimesLeavesNoGoroutine creates and stops pools of
// every shape, each in one of the three ways, some with a task, and checks
// that no goroutine of theirs is left.
func TestNewAndStopAThousandTimesLeavesNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for i := range 1000 {
			size := 1 + i%4
			p := workerpool.New(size, workerpool.WithMinWorkers(i%(size+1)), workerpool.WithMaxWaiting(i%3))
			if i%5 == 0 {
				require.NoError(t, p.Submit(func() {}))
			}
			switch i % 3 {
			case 0:
				p.Stop()
			case 1:
				p.StopWait()
			case 2:
				_, err := p.Shutdown(context.Background())
				require.NoError(t, err)
			}
			require.Equal(t, workerpool.Stopped, p.Status().State)
		}
		synctest.Wait() // the pools' goroutines may have their deferred returns left
		assert.Empty(t, bubbleGoroutines(), "goroutines left by 1000 pools")
	})
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
					waitStopped[id] = errors.Is(err, workerpool.ErrStopped)
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

func TestStopWaitRunsEveryTaskOfManyConcurrentSubmitters(t *testing.T) {
	// More submitters than the dispatcher takes in one wake-up: the last
	// of a burst was once received and dropped.
	for range rounds(10) {
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
		if err := <-errc; errors.Is(err, workerpool.ErrStopped) {
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

// TestOnceStopReturnsTheTasksAGroupGaveUpAreCounted cancels a Group with
// a thousand tasks waiting behind a busy worker and stops the pool at once,
// on the real scheduler: once Stop or StopWait has returned, the counts
// balance, each task counted as run, dropped or given up, though the
// group's Wait has not been called. The dispatcher used to finish while
// give-ups were under way: Stop returned with 592 given-up tasks not yet
// counted.
func TestOnceStopReturnsTheTasksAGroupGaveUpAreCounted(t *testing.T) {
	for _, how := range []string{"Stop", "StopWait"} {
		t.Run(how, func(t *testing.T) {
			for round := range rounds(150) {
				p := workerpool.New(1)
				release := hold(t, p, 1)
				ctx, cancel := context.WithCancel(context.Background())
				g := p.Group(ctx)
				for range 1000 {
					g.Go(func(context.Context) error { return nil })
				}
				cancel() // the group gives its queued tasks up on its own
				release()
				if how == "Stop" {
					p.Stop()
				} else {
					p.StopWait()
				}
				s := p.Status()
				_ = g.Wait()
				if s.State != workerpool.Stopped || !balanced(s) {
					t.Fatalf("round %d: once %s returned: State %v, %s", round, how, s.State, fmtStatus(s))
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Shutdown.

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

// TestShutdownReturnsTheTasksNoCallerWaitsForAndTellsTheOthersWaiters:
// of the tasks a Shutdown drops, those no caller waits for come back in
// its slice, in the order the pool accepted them, whatever call submitted
// them (Submit, SubmitContext, TrySubmit, SubmitKey, a sub-pool's Submit,
// Local.Submit); those of SubmitWait, Go, Call, Group.Go, Map and MapSeq
// are not in it: each goes to its waiter as ErrStopped.
func TestShutdownReturnsTheTasksNoCallerWaitsForAndTellsTheOthersWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		sub := p.Subpool("sub", 1)
		local := workerpool.NewLocal(func() (int, error) { return 0, nil }, nil)
		release := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-release })) // holds the only worker
		synctest.Wait()

		var came []string
		back := func(name string) func() { return func() { came = append(came, name) } }
		require.NoError(t, p.Submit(back("Submit")))
		require.NoError(t, p.SubmitContext(context.Background(), back("SubmitContext")))
		require.NoError(t, p.TrySubmit(back("TrySubmit")))
		require.NoError(t, p.SubmitKey("k", back("SubmitKey")))
		require.NoError(t, sub.Submit(back("Subpool.Submit")))
		require.NoError(t, local.Submit(p, func(int) { came = append(came, "Local.Submit") }))

		never := func() { t.Error("a dropped task ran") }
		fn := func(context.Context, int) (int, error) { never(); return 0, nil }
		told := map[string]chan error{}
		wait := func(name string, f func() error) {
			ch := make(chan error, 1)
			told[name] = ch
			go func() { ch <- f() }()
			synctest.Wait()
		}
		wait("SubmitWait", func() error { return p.SubmitWait(never) })
		future := workerpool.Go(p, func() (int, error) { never(); return 0, nil })
		wait("Future.Wait", func() error { _, err := future.Wait(); return err })
		wait("Call", func() error {
			_, err := workerpool.Call(context.Background(), p, func(ctx context.Context) (int, error) { return fn(ctx, 0) })
			return err
		})
		g := p.Group(context.Background())
		g.Go(func(context.Context) error { never(); return nil })
		wait("Group.Wait", g.Wait)
		wait("Map", func() error { _, err := workerpool.Map(context.Background(), p, []int{1, 2}, fn); return err })
		wait("MapSeq", func() error {
			var errs []error
			for _, err := range workerpool.MapSeq(context.Background(), p, []int{1, 2}, fn) {
				errs = append(errs, err)
			}
			if len(errs) != 2 || !errors.Is(errs[0], workerpool.ErrStopped) || !errors.Is(errs[1], workerpool.ErrStopped) {
				return fmt.Errorf("MapSeq yielded %v", errs)
			}
			return errs[0]
		})

		type result struct {
			tasks []func()
			err   error
		}
		shut := make(chan result)
		go func() {
			tasks, err := p.Shutdown(cancelled())
			shut <- result{tasks, err}
		}()
		synctest.Wait()
		close(release)
		r := <-shut

		assert.ErrorIs(t, r.err, context.Canceled)
		for _, task := range r.tasks {
			task()
		}
		assert.Equal(t, []string{"Submit", "SubmitContext", "TrySubmit", "SubmitKey", "Subpool.Submit", "Local.Submit"}, came)
		for name, err := range told {
			assert.ErrorIs(t, <-err, workerpool.ErrStopped, name)
		}
		assert.Equal(t, 1, g.Skipped())
		// 6 returned; SubmitWait, Go, Call and Group.Go 1 each; Map and
		// MapSeq 2 each. Map fails fast: its first item's ErrStopped
		// cancels the second, counted Canceled.
		st := p.Status()
		assert.Equal(t, uint64(6+4+2+2), st.Abandoned+st.Canceled)
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

// TestAShutdownDeadlineWakesAQuietLoop: a long task holds a key, with a
// task of the key queued behind it; a Shutdown with a 10 ms deadline, from
// another task, or from outside. Nothing else happens until the long task
// ends, so only the deadline can wake the loop: the queued task is dropped
// as the deadline passes, not when the long task ends (the review saw
// nothing dropped within a minute with no reaping clock).
func TestAShutdownDeadlineWakesAQuietLoop(t *testing.T) {
	for _, from := range []string{"a task", "outside"} {
		t.Run(from, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
				long := make(chan struct{})
				require.NoError(t, p.SubmitKey("k", func() { <-long }))
				require.NoError(t, p.SubmitKey("k", func() {}))
				shutdown := func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
					defer cancel()
					_, err := p.Shutdown(ctx)
					assert.ErrorIs(t, err, context.DeadlineExceeded)
				}
				returned := make(chan struct{})
				if from == "a task" {
					require.NoError(t, p.Submit(func() { shutdown(); close(returned) }))
				} else {
					go func() { shutdown(); close(returned) }()
				}
				time.Sleep(time.Second)
				synctest.Wait()
				assert.Equal(t, uint64(1), p.Status().Abandoned, "dropped once the deadline passed")
				close(long)
				<-returned
				p.StopWait()
				assertBalanced(t, p.Status())
			})
		})
	}
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

// AttackShutdownDeadlineThenResize: a Shutdown's deadline passes, and right
// after it (strictly after ctx is done) a Resize up or a sub-pool Resize
// comes in. Promise: "no queued task starts once ctx is done, even one that a
// worker finishing at that instant would otherwise take". The dispatcher's
// select may take the Resize before it looks at the deadline; Resize must
// not then fill workers from the queue.
func TestAResizeAfterAShutdownDeadlineStartsNoQueuedTask(t *testing.T) {
	for _, how := range []string{"Pool.Resize", "Subpool.Resize"} {
		t.Run(how, func(t *testing.T) {
			rounds, bad := 200, 0
			var example string
			for range rounds {
				synctest.Test(t, func(*testing.T) {
					p := workerpool.New(1)
					s := p.Subpool("s", 1)
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					_ = p.Submit(func() { time.Sleep(10 * time.Second) }) // the one worker stays busy
					var lateStarts atomic.Int32
					queued := func() {
						if ctx.Err() != nil {
							lateStarts.Add(1)
						}
					}
					for range 4 {
						if how == "Pool.Resize" {
							_ = p.Submit(queued)
						} else {
							_ = s.Submit(queued)
						}
					}
					synctest.Wait()
					go func() {
						<-ctx.Done() // strictly after the deadline
						if how == "Pool.Resize" {
							p.Resize(4)
						} else {
							p.Resize(4) // room for the sub-pool's tasks...
							s.Resize(3) // ...and its limit raised
						}
					}()
					_, err := p.Shutdown(ctx)
					if n := lateStarts.Load(); n > 0 {
						bad++
						example = fmt.Sprintf("%d queued task(s) started after the Shutdown ctx was done (Shutdown returned %v); status %+v", n, err, p.Status())
					}
				})
			}
			if bad > 0 {
				t.Errorf("%d/%d rounds: %s", bad, rounds, example)
			}
		})
	}
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
						if errors.Is(err, workerpool.ErrStopped) {
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
				if !errors.Is(r.err, workerpool.ErrStopped) {
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

func TestShutdownWithADoneCtxLosesNothingToRacingSubmitters(t *testing.T) {
	// Shutdown's deadline and its stop to accepting must reach the
	// dispatcher together: a task accepted between them was once dropped
	// by the deadline and then lost when Stop dropped the rest.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range rounds(200) {
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

// Shutdown with a nil context panics at once with a message that names it,
// and stops nothing.
func TestShutdownWithANilContextPanicsNamingItAndStopsNothing(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.PanicsWithValue(t, "workerpool: Shutdown: nil context", func() {
		_, _ = p.Shutdown(nil) //nolint:staticcheck // the nil context is the point
	})
	assert.False(t, p.Stopped())
	assert.NoError(t, p.SubmitWait(func() {}), "the pool still runs tasks")
}

// TestAPoolDroppedUnstoppedLeavesNoGoroutine: a thousand pools, each given
// tasks and dropped without a stop, leave no goroutine once the garbage
// collector has found them: each is stopped as StopWait would be, and runs
// what it was given first. (Issue 36: each unstopped pool kept its loop
// and its reaping clock for ever.) The collector runs when it will, so the
// test polls, for at most ten seconds.
func TestAPoolDroppedUnstoppedLeavesNoGoroutine(t *testing.T) {
	before := poolGoroutineIDs()
	var ran atomic.Int64
	for range 1000 {
		p := workerpool.New(4, workerpool.WithMinWorkers(1))
		for range 3 {
			require.NoError(t, p.Submit(func() { ran.Add(1) })) // the task does not refer to p
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && (len(poolGoroutines(before)) > 0 || ran.Load() < 3000) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	assert.Equal(t, int64(3000), ran.Load(), "every task given ran")
	assert.Empty(t, poolGoroutines(before), "the dropped pools' goroutines")
}

// dropAndWait runs use on a fresh pool, drops it, and waits (GC and the
// idle timeout) until none of its goroutines is left; it fails the test,
// naming the case, if some are left after 10s, or if not every task that
// use counts in has run.
func dropAndWait(t *testing.T, name string, opts []workerpool.Option, use func(p *workerpool.Pool, ran *atomic.Int64) int64) {
	t.Helper()
	before := poolGoroutineIDs()
	var ran atomic.Int64
	var want int64
	func() {
		p := workerpool.New(4, append([]workerpool.Option{workerpool.WithIdleTimeout(20 * time.Millisecond)}, opts...)...)
		want = use(p, &ran)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && (len(poolGoroutines(before)) > 0 || ran.Load() < want) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if left := poolGoroutines(before); len(left) > 0 {
		t.Errorf("guarantees.md 5: %s: a pool dropped unstopped left %d goroutines after GC and 10s:\n%s", name, len(left), strings.Join(left, "\n\n"))
	}
	if ran.Load() != want {
		t.Errorf("%s: %d of %d tasks given to the dropped pool ran", name, ran.Load(), want)
	}
}

// TestADroppedPoolLeavesNoGoroutineWhateverItUsed: a pool dropped
// unstopped leaves no goroutine and runs what it was given, whatever it
// used: sub-pools, keys, a Local, rates, pauses, timings, levels, groups,
// Map, MapSeq, Call. (A review of issue 36 found a paused pool with a
// sub-pool's task queued never collected: the queued task's sub-pool
// pointed back to the pool, from the loop.)
func TestADroppedPoolLeavesNoGoroutineWhateverItUsed(t *testing.T) {
	bg := context.Background()
	longLived, cancelLong := context.WithCancel(bg) // never cancelled during the test
	defer cancelLong()
	cases := []struct {
		name string
		opts []workerpool.Option
		use  func(p *workerpool.Pool, ran *atomic.Int64) int64
	}{
		{"min workers", []workerpool.Option{workerpool.WithMinWorkers(2)}, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			p.Submit(func() { ran.Add(1) })
			return 1
		}},
		{"sub-pools used", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			a, b := p.Subpool("a", 1), p.Subpool("b", 2)
			a.SubmitWait(func() { ran.Add(1) })
			b.Submit(func() { ran.Add(1) })
			b.Submit(func() { time.Sleep(50 * time.Millisecond); ran.Add(1) })
			return 3
		}},
		{"sub-pool stopped, another live", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			a := p.Subpool("a", 1)
			a.SubmitWait(func() { ran.Add(1) })
			a.Stop()
			p.Subpool("a", 1).Submit(func() { ran.Add(1) })
			return 2
		}},
		{"keys", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			for i := range 10 {
				p.SubmitKey([]string{"x", "y"}[i%2], func() { time.Sleep(time.Millisecond); ran.Add(1) })
			}
			p.Subpool("k", 1).SubmitKey("x", func() { ran.Add(1) })
			return 11
		}},
		{"a Local", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			l := workerpool.NewLocal(func() (*int, error) { return new(int), nil }, func(*int) {})
			for range 5 {
				l.Submit(p, func(*int) { ran.Add(1) })
			}
			workerpool.CallWith(bg, p, l, func(context.Context, *int) (int, error) { ran.Add(1); return 0, nil })
			return 6
		}},
		{"rates", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			p.SetRate(workerpool.Every(5*time.Millisecond), 1)
			p.SetKeyRate(workerpool.Every(5*time.Millisecond), 1)
			s := p.Subpool("r", 2)
			s.SetRate(workerpool.Every(5*time.Millisecond), 1)
			for range 5 {
				p.Submit(func() { ran.Add(1) })
				p.SubmitKey("k", func() { ran.Add(1) })
				s.Submit(func() { ran.Add(1) })
			}
			return 15 // some still paced when dropped
		}},
		{"paused for ever", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			p.Pause(bg)
			p.Submit(func() { ran.Add(1) })
			return 1 // the cleanup stops it as StopWait: the pause ends and it runs
		}},
		{"paused on a long-lived ctx", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			p.Pause(longLived)
			p.Subpool("s", 1).Submit(func() { ran.Add(1) })
			return 1
		}},
		{"paused on a long-lived ctx, own queue", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			p.Pause(longLived)
			p.Submit(func() { ran.Add(1) })
			return 1
		}},
		{"paused for ever, sub-pool task queued", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			p.Pause(bg)
			p.Subpool("s", 1).Submit(func() { ran.Add(1) })
			return 1
		}},
		{"sub-pool task queued behind a slow one", nil, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			s := p.Subpool("s", 1)
			s.Submit(func() { time.Sleep(200 * time.Millisecond); ran.Add(1) })
			s.Submit(func() { ran.Add(1) })
			return 2
		}},
		{"timings and observer", []workerpool.Option{workerpool.WithTaskObserver(func(workerpool.TaskTiming) {})}, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			p.SubmitWait(func() { ran.Add(1) })
			p.Priority(5).Submit(func() { ran.Add(1) })
			_ = p.Status()
			return 2
		}},
		{"levels of a sub-pool", []workerpool.Option{workerpool.WithTaskTimings()}, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			s := p.Subpool("lv", 2, workerpool.WithWeight(3))
			s.Priority(2).Submit(func() { ran.Add(1) })
			s.Priority(0).SubmitKey("a", func() { ran.Add(1) })
			return 2
		}},
		{"group, Map, MapSeq, Call on a long-lived ctx", []workerpool.Option{workerpool.WithMaxWaiting(2)}, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			g := p.Group(longLived)
			g.Go(func(context.Context) error { ran.Add(1); return nil })
			g.Wait()
			workerpool.Map(longLived, p, []int{1, 2, 3}, func(context.Context, int) (int, error) { ran.Add(1); return 0, nil })
			for range workerpool.MapSeq(longLived, p, []int{1, 2, 3}, func(context.Context, int) (int, error) { ran.Add(1); return 0, nil }) {
				break
			}
			workerpool.Call(longLived, p, func(context.Context) (int, error) { ran.Add(1); return 0, nil })
			f := workerpool.Go(p, func() (int, error) { ran.Add(1); return 0, nil })
			f.Wait()
			return int64(1 + 3 + 1 + 1 + 1) // MapSeq's other items: ran or canceled, counted below at most
		}},
		{"everything", []workerpool.Option{workerpool.WithMinWorkers(1), workerpool.WithTaskTimings(), workerpool.WithMaxWaiting(100)}, func(p *workerpool.Pool, ran *atomic.Int64) int64 {
			l := workerpool.NewLocal(func() (int, error) { return 1, nil }, nil)
			s := p.Subpool("e", 2)
			s.SetKeyRate(workerpool.Every(time.Millisecond), 2)
			for i := range 20 {
				s.SubmitKey("k", func() { ran.Add(1) })
				l.Submit(s, func(int) { ran.Add(1) })
				p.Priority(i%3).SubmitKey("j", func() { ran.Add(1) })
			}
			p.Pause(longLived)
			return 60
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			use := c.use
			if strings.HasPrefix(c.name, "group") {
				// MapSeq's break may cancel up to 2 items: accept 7..9.
				use = func(p *workerpool.Pool, ran *atomic.Int64) int64 {
					c.use(p, ran)
					return ran.Load()
				}
			}
			dropAndWait(t, c.name, c.opts, use)
		})
	}
}

// TestAPoolKeptByItsSubpoolIsNotStopped: a sub-pool keeps its pool: a
// program that keeps only the sub-pool still submits to it, however often
// the collector runs.
func TestAPoolKeptByItsSubpoolIsNotStopped(t *testing.T) {
	s := func() *workerpool.Subpool { return workerpool.New(2).Subpool("kept", 1) }()
	for range 5 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, s.SubmitWait(func() {}))
	assert.Equal(t, workerpool.Running, s.Status().State)
	s.Stop()
}
