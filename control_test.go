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

// The tests of Pause and Resize.

func TestPauseWaitsForRunningTasksAndHoldsNewOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		for range 2 {
			require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		}
		start := time.Now()
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		assert.Equal(t, time.Second, time.Since(start), "Pause returns once running tasks finished")
		assert.Equal(t, workerpool.Paused, p.Status().State)

		var ran atomic.Int64
		for range 5 {
			require.NoError(t, p.Submit(func() { ran.Add(1) }))
		}
		time.Sleep(time.Hour)
		assert.Zero(t, ran.Load(), "no task is handed out while paused")
		assert.Equal(t, 5, p.WaitingQueueSize())

		resume()
		synctest.Wait()
		assert.Equal(t, int64(5), ran.Load())
		assert.Equal(t, workerpool.Running, p.Status().State)
		p.StopWait()
	})
}

func TestASecondPauseWaitsForTheFirstToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		ctx1, end1 := context.WithCancel(context.Background())
		p.Pause(ctx1)
		require.NoError(t, p.Submit(func() {}))

		ctx2, end2 := context.WithCancel(context.Background())
		second := make(chan struct{})
		go func() { p.Pause(ctx2); close(second) }()
		synctest.Wait()
		select {
		case <-second:
			t.Error("the second Pause returned during the first")
		default:
		}

		end1()
		<-second
		assert.Equal(t, workerpool.Paused, p.Status().State, "the second pause follows the first")
		assert.Equal(t, 1, p.WaitingQueueSize(), "with no task handed out in between")
		end2()
		synctest.Wait()
		assert.Zero(t, p.WaitingQueueSize())
		p.StopWait()
	})
}

func TestStopEndsPauses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stop   func(*workerpool.Pool) []func()
		ran    int64
		backed int
	}{
		{"StopWait runs the held tasks", func(p *workerpool.Pool) []func() { p.StopWait(); return nil }, 3, 0},
		{"Stop returns the held tasks", (*workerpool.Pool).Stop, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2)
				p.Pause(context.Background()) // never ends by itself
				var ran atomic.Int64
				for range 3 {
					require.NoError(t, p.Submit(func() { ran.Add(1) }))
				}
				queued := make(chan struct{})
				go func() { p.Pause(context.Background()); close(queued) }()
				synctest.Wait()

				assert.Len(t, tc.stop(p), tc.backed)
				assert.Equal(t, tc.ran, ran.Load())
				<-queued // a waiting Pause is released too
				p.Pause(context.Background())
				assert.Equal(t, workerpool.Stopped, p.Status().State, "Pause on a stopped pool returns at once")
			})
		})
	}
}

func TestPauseHoldsSubpoolsAndKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		a := p.Subpool("a", 2)
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		var ran atomic.Int64
		require.NoError(t, a.Submit(func() { ran.Add(1) }))
		require.NoError(t, a.SubmitKey("k", func() { ran.Add(1) }))
		require.NoError(t, p.SubmitKey("k", func() { ran.Add(1) }))
		time.Sleep(time.Hour)
		assert.Zero(t, ran.Load())
		assert.Equal(t, 2, a.Status().Waiting)
		assert.Equal(t, workerpool.Paused, a.Status().State)
		resume()
		p.StopWait()
		assert.Equal(t, int64(3), ran.Load())
	})
}

// ---------------------------------------------------------------------------
// Resize.

func TestResizeUpStartsWorkersForWaitingTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 5)
		synctest.Wait()
		require.Equal(t, 4, p.WaitingQueueSize())

		p.Resize(3)
		assert.Equal(t, 3, p.Size())
		s := p.Status()
		assert.Equal(t, 3, s.Busy)
		assert.Equal(t, 2, s.Waiting)
		assert.Equal(t, 3, s.MaxWorkers)
		release()
		p.StopWait()
	})
}

func TestResizeDownRetiresSurplusWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4, workerpool.WithIdleTimeout(-1))
		release := hold(t, p, 2)
		require.NoError(t, p.SubmitWait(func() {})) // starts a third worker, which idles
		synctest.Wait()
		require.Equal(t, workerpool.Status{Workers: 3, Busy: 2, Idle: 1}, pick(p.Status()))

		p.Resize(1)
		assert.Equal(t, workerpool.Status{Workers: 2, Busy: 2, Idle: 0}, pick(p.Status()),
			"idle surplus workers exit at once, busy ones keep running")

		var running, peak atomic.Int64
		for range 10 {
			require.NoError(t, p.Submit(func() {
				peak.Store(max(peak.Load(), running.Add(1)))
				time.Sleep(time.Millisecond)
				running.Add(-1)
			}))
		}
		release()
		synctest.Wait()
		assert.Equal(t, 1, p.Status().Workers, "busy surplus workers exit when their task ends")
		p.StopWait()
		assert.Equal(t, int64(1), peak.Load(), "tasks after the shrink run one at a time")
	})
}

// A busy worker that Resize makes surplus is told to exit, but that is not
// a task: while it finishes, the bounded queue has all its room, as Status,
// TrySubmit, Reject and Block all agree (the review's case: New(2,
// WithMaxWaiting(1)), both workers busy, Resize(1)).
func TestASurplusWorkerTakesNoRoomInTheQueue(t *testing.T) {
	for _, overflow := range []workerpool.Overflow{workerpool.Block, workerpool.Reject} {
		t.Run(overflow.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(overflow))
				release := hold(t, p, 2)
				p.Resize(1)
				synctest.Wait()
				assert.Equal(t, workerpool.Status{Workers: 2, Busy: 2, Idle: 0}, pick(p.Status()))
				assert.Zero(t, p.Status().Waiting)

				submitted := make(chan error, 1)
				go func() { submitted <- p.Submit(func() {}) }()
				synctest.Wait()
				select {
				case err := <-submitted:
					require.NoError(t, err, "the queue had room for one")
				default:
					t.Fatal("Submit waited though the queue had room")
				}
				assert.Equal(t, 1, p.Status().Waiting)
				assert.ErrorIs(t, p.TrySubmit(func() {}), workerpool.ErrQueueFull, "now the queue is full")
				assert.Equal(t, uint64(1), p.Status().Rejected, "the one TrySubmit refused")
				release()
				p.StopWait()
				s := p.Status()
				assert.Equal(t, uint64(3), s.Completed)
				assert.Equal(t, 1, s.PeakWaiting)
			})
		})
	}
}

func TestResizePanicsOnImpossibleSize(t *testing.T) {
	p := workerpool.New(4, workerpool.WithMinWorkers(2))
	defer p.Stop()
	assert.PanicsWithValue(t, "workerpool: Resize(0): the maximum must be at least 1 and at least MinWorkers (2)", func() { p.Resize(0) })
	assert.PanicsWithValue(t, "workerpool: Resize(1): the maximum must be at least 1 and at least MinWorkers (2)", func() { p.Resize(1) })
	assert.NotPanics(t, func() { p.Resize(2) })
}

// ---------------------------------------------------------------------------
// Resize down as workers finish, exit or panic: the surplus drains away and
// the pool goes on.

// TestResizeDownAsWorkersComeFree: "lowering it makes idle workers
// above n exit at once and busy ones as their task ends". Both workers
// finish tiny tasks as Resize(1) lowers the maximum; afterwards a task
// must still run.
func TestResizeDownAsWorkersComeFree(t *testing.T) {
	for round := range 3000 {
		p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
		gate := make(chan struct{})
		for range 2 {
			atkNoErr(t, p.Submit(func() { <-gate }))
		}
		for p.Status().Busy < 2 {
			runtime.Gosched()
		}
		close(gate)
		p.Resize(1)
		ran := make(chan struct{})
		atkNoErr(t, p.Submit(func() { close(ran) }))
		select {
		case <-ran:
		case <-time.After(2 * time.Second):
			st := p.Status()
			t.Fatalf("round %d: a task submitted after Resize(1) has not started 2s later (Workers %d, Busy %d, Idle %d, Waiting %d, MaxWorkers %d)", round, st.Workers, st.Busy, st.Idle, st.Waiting, st.MaxWorkers)
		}
		p.Stop()
	}
}

// A11. Resize down at the instant workers finish their tasks, with no
// reaping: "lowering it makes idle workers above n exit at once and busy
// ones as their task ends". Then a task submitted must run.
func TestResizeDownAsWorkersFinish(t *testing.T) {
	stuck := 0
	const rounds = 300
	for round := range rounds {
		const w = 6
		p := workerpool.New(w, workerpool.WithIdleTimeout(-1))
		var wg sync.WaitGroup
		release := make(chan struct{})
		for range w {
			wg.Add(1)
			p.Submit(func() { wg.Done(); <-release })
		}
		wg.Wait() // the tasks are running
		close(release)
		if round%2 == 1 {
			time.Sleep(time.Duration(round%7) * time.Microsecond)
		}
		p.Resize(1)
		done := make(chan error, 1)
		go func() { done <- p.SubmitWait(func() {}) }()
		select {
		case <-done:
			p.Stop()
		case <-time.After(500 * time.Millisecond):
			stuck++
			if stuck <= 2 {
				t.Errorf("round %d: after Resize(1), a task did not start within 500ms: %+v", round, p.Status())
			}
			p.Stop()
			<-done
		}
	}
	if stuck > 0 {
		t.Errorf("%d/%d rounds stuck", stuck, rounds)
	}
}

// AttackResizeDownRace: the busy tasks end just as the pool applies
// Resize(1) (they spin until Size() says 1). Promise: busy surplus workers
// exit as their task ends, "also when nothing else happens afterwards".
func TestResizeDownRacingTaskEnds(t *testing.T) {
	rounds := 200
	bad := 0
	for r := range rounds {
		func() {
			const n = 4
			p := workerpool.New(n, workerpool.WithIdleTimeout(-1))
			defer func() {
				p.Resize(n) // unstick whatever the round left
				p.Stop()
			}()
			var started sync.WaitGroup
			started.Add(n)
			for range n {
				_ = p.Submit(func() {
					started.Done()
					for p.Size() != 1 {
						runtime.Gosched()
					}
				})
			}
			started.Wait()
			p.Resize(1)
			// Let everything settle on the real clock.
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if s := p.Status(); s.Workers == 1 && s.Busy == 0 {
					return
				}
				time.Sleep(time.Millisecond)
			}
			s := p.Status()
			bad++
			if bad <= 3 {
				t.Errorf("round %d: 2s after Resize(1) with every task ended: Workers=%d Busy=%d Idle=%d MaxWorkers=%d", r, s.Workers, s.Busy, s.Idle, s.MaxWorkers)
			}
			// And does a new task start?
			ran := make(chan struct{})
			_ = p.Submit(func() { close(ran) })
			if !waitOrTimeout(ran, time.Second) && bad <= 3 {
				t.Errorf("round %d: a new task did not start within 1s; status %+v", r, p.Status())
			}
		}()
	}
	if bad > 0 {
		t.Errorf("%d/%d rounds left surplus idle workers", bad, rounds)
	}
}

// Resize down under a flood of submissions on an unbounded queue: the
// dispatcher takes up to 64 messages in a row after the Resize before it
// tells the workers to retire, and a worker that finishes meanwhile parks.
// Promise: surplus workers drain away as their tasks end, and every task
// queued runs (no reaping here to rescue it).
func TestResizeDownUnderAFlood(t *testing.T) {
	rounds, bad := rounds(100), 0
	for r := range rounds {
		func() {
			const n = 4
			p := workerpool.New(n, workerpool.WithIdleTimeout(-1))
			defer func() { p.Resize(n); p.Stop() }()
			var ran, accepted atomic.Int64 // settle: 1s
			stopSubmitters := spinning(4, func() {
				if p.Submit(func() { ran.Add(1) }) == nil {
					accepted.Add(1)
				}
			})
			for ran.Load() < 2000 {
				runtime.Gosched()
			}
			p.Resize(1)
			stopSubmitters()
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) && (ran.Load() < accepted.Load() || p.Status().Workers > 1) {
				time.Sleep(time.Millisecond)
			}
			if s := p.Status(); ran.Load() < accepted.Load() || s.Workers > 1 {
				bad++
				if bad <= 3 {
					t.Errorf("round %d: 1s after Resize(1): ran %d of %d accepted; Workers %d Busy %d Waiting %d", r, ran.Load(), accepted.Load(), s.Workers, s.Busy, s.Waiting)
				}
				if ran.Load() < accepted.Load() {
					done := make(chan struct{})
					go func() { p.StopWait(); close(done) }()
					if !waitOrTimeout(done, 500*time.Millisecond) {
						if bad <= 3 {
							t.Errorf("round %d: and StopWait blocks (0.5s so far); status %+v", r, p.Status())
						}
						p.Resize(n) // lets it finish
						<-done
					}
				}
			}
		}()
	}
	if bad > 0 {
		t.Errorf("%d/%d rounds stalled or kept surplus workers", bad, rounds)
	}
}

// AttackResizeDownGoexit: two busy workers, Resize(1), both tasks call
// runtime.Goexit. Promise: busy surplus workers exit as their task ends;
// workers drain down to the maximum, and the pool keeps working.
func TestResizeDownRetiresBusyWorkersWhoseTasksCallGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
		release := make(chan struct{})
		for range 2 {
			if err := p.Submit(func() { <-release; runtime.Goexit() }); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		p.Resize(1)
		close(release)
		synctest.Wait()
		if s := p.Status(); s.Workers != 1 {
			t.Errorf("after Resize(1) and both tasks ended (Goexit): Workers = %d, want 1 (status %+v)", s.Workers, s)
		}
		// Does the pool still run tasks?
		ran := make(chan struct{})
		if err := p.Submit(func() { close(ran) }); err != nil {
			t.Fatal(err)
		}
		if !waitOrTimeout(ran, time.Hour) {
			t.Errorf("a task submitted after the Goexits did not start within an hour (fake clock); status %+v", p.Status())
		}
		stopped := make(chan struct{})
		go func() { p.StopWait(); close(stopped) }()
		if !waitOrTimeout(stopped, time.Hour) {
			t.Errorf("StopWait did not return within an hour (fake clock); status %+v", p.Status())
			p.Resize(2) // unstick, so the bubble can end
			<-stopped
		}
	})
}

// Same as above, but the tasks panic and the panic handler calls
// runtime.Goexit (as t.Fatal would), which the docs allow: "The pool keeps
// its full capacity either way, even if h calls runtime.Goexit".
func TestResizeDownRetiresBusyWorkersWhosePanicHandlerCallsGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithIdleTimeout(-1),
			workerpool.WithPanicHandler(func(*workerpool.PanicError) { runtime.Goexit() }))
		release := make(chan struct{})
		for range 2 {
			if err := p.Submit(func() { <-release; panic("boom") }); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		p.Resize(1)
		close(release)
		synctest.Wait()
		if s := p.Status(); s.Workers != 1 {
			t.Errorf("Workers = %d after Resize(1) and both tasks ended, want 1", s.Workers)
		}
		done := make(chan struct{})
		go func() { _ = p.SubmitWait(func() {}); close(done) }()
		if !waitOrTimeout(done, time.Hour) {
			t.Errorf("SubmitWait blocked for an hour (fake clock) on a running pool; status %+v", p.Status())
			p.Resize(2)
			<-done
		}
		p.StopWait()
	})
}

// A11b. Deterministic: busy workers made surplus by Resize, whose tasks
// call runtime.Goexit ("costs no capacity"), must still retire as their
// task ends; then the next task must run.
func TestResizeDownLetsTheNextTaskRunHoweverTheBusyTasksEnd(t *testing.T) {
	for _, exit := range []string{"return", "panic", "Goexit", "handlerGoexit"} {
		t.Run(exit, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(3, workerpool.WithIdleTimeout(-1),
					workerpool.WithPanicHandler(func(*workerpool.PanicError) {
						if exit == "handlerGoexit" {
							runtime.Goexit()
						}
					}))
				defer p.Stop()
				release := make(chan struct{})
				for range 3 {
					p.Submit(func() {
						<-release
						switch exit {
						case "panic", "handlerGoexit":
							panic("x")
						case "Goexit":
							runtime.Goexit()
						}
					})
				}
				synctest.Wait()
				p.Resize(1) // all three busy: they retire as their tasks end
				close(release)
				synctest.Wait()
				ran := make(chan struct{})
				p.Submit(func() { close(ran) })
				synctest.Wait()
				select {
				case <-ran:
				default:
					t.Errorf("after Resize(1) and the tasks' end, a new task does not run: %s; Workers=%d MaxWorkers=%d",
						fmtStatus(p.Status()), p.Status().Workers, p.Status().MaxWorkers)
				}
			})
		})
	}
}

// The same with the default idle timeout: a task submitted after the
// Goexits starts at once; it does not wait for the reaper to quit the idle
// surplus worker.
func TestResizeDownThenGoexitLeavesNoTaskWaitingForTheReaper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.StopWait()
		release := make(chan struct{})
		for range 2 {
			_ = p.Submit(func() { <-release; runtime.Goexit() })
		}
		synctest.Wait()
		p.Resize(1)
		close(release)
		synctest.Wait()
		start := time.Now()
		if err := p.SubmitWait(func() {}); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited > 0 {
			t.Errorf("a task on a pool with idle workers waited %v (fake clock) before it started; workers now %d", waited, p.Status().Workers)
		}
	})
}

// A11c. The same with reaping on: how long the task waits.
func TestResizeDownThenGoexitWithReaping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(3, workerpool.WithIdleTimeout(time.Second))
		defer p.Stop()
		release := make(chan struct{})
		for range 3 {
			p.Submit(func() { <-release; runtime.Goexit() })
		}
		synctest.Wait()
		p.Resize(1)
		close(release)
		synctest.Wait()
		start := time.Now()
		if err := p.SubmitWait(func() {}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 0 {
			t.Errorf("the task waited %v (bubble time) for a worker, with 3 idle workers and MaxWorkers 1", took)
		}
	})
}

// Pause with a nil context panics at once with a message that names it,
// and pauses nothing.
func TestPauseWithANilContextPanicsNamingIt(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.PanicsWithValue(t, "workerpool: Pause: nil context", func() {
		p.Pause(nil) //nolint:staticcheck // the nil context is the point
	})
	assert.Equal(t, workerpool.Running, p.Status().State)
	assert.NoError(t, p.SubmitWait(func() {}), "the pool still hands out tasks")
}

// TestAChangeDuringAStopTakesNoTaskOutOfReach: tasks that wait in the
// hand-off's outbox while the pool stops (here behind a sub-pool at the
// pool's maximum) can be taken back into the scheduler by a Resize of the
// pool or of a sub-pool, or a new rate; they then run, within the new
// limit, before the stop returns. FuzzPool found the loop finished while
// the outbox held tasks, and a sub-pool's Resize during a Shutdown took
// them back where no one would hand them out: the stop returned with two
// tasks Waiting for ever, neither run nor abandoned.
func TestAChangeDuringAStopTakesNoTaskOutOfReach(t *testing.T) {
	changes := map[string]func(p *workerpool.Pool, s *workerpool.Subpool){
		"Subpool.Resize":  func(_ *workerpool.Pool, s *workerpool.Subpool) { s.Resize(1) },
		"Pool.Resize":     func(p *workerpool.Pool, _ *workerpool.Subpool) { p.Resize(1) },
		"Subpool.SetRate": func(_ *workerpool.Pool, s *workerpool.Subpool) { s.SetRate(workerpool.Every(time.Millisecond), 1) },
		"Pool.SetRate":    func(p *workerpool.Pool, _ *workerpool.Subpool) { p.SetRate(workerpool.Every(time.Millisecond), 1) },
	}
	for name, change := range changes {
		for _, stop := range stopFromInside[1:] { // StopWait and Shutdown run the queue
			t.Run(name+"/"+stop.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := workerpool.New(2)
					s := p.Subpool("A", 2) // at the maximum: its tasks wait in the outbox
					release := make(chan struct{})
					var ran atomic.Int32
					for range 4 {
						require.NoError(t, s.Submit(func() { <-release; ran.Add(1) }))
					}
					synctest.Wait()
					stopped := make(chan struct{})
					go func() { _, _ = stop.stop(p); close(stopped) }()
					synctest.Wait()
					change(p, s)
					close(release)
					<-stopped
					st := p.Status()
					assert.Equal(t, int32(4), ran.Load(), "guarantees.md 2: %s runs every task accepted; %v", stop.name, st)
					assert.Zero(t, st.Waiting, "guarantees.md 9: nothing waits once the stop returned")
					assertBalanced(t, st)
				})
			})
		}
	}
}
