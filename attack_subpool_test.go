package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

// A1. Subpool.Group: "as Pool.Group does for the pool". Group.Skipped's doc:
// once the group's context is done, its queued tasks leave the queue at
// once, whether or not Wait has been called, and Canceled counts them.
func TestSubpoolGroupTasksLeaveTheQueueBeforeWait(t *testing.T) {
	for _, onSub := range []bool{false, true} {
		t.Run(fmt.Sprintf("subpool=%v", onSub), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1)
				defer p.Stop()
				sub := p.Subpool("s", 1)
				block := make(chan struct{})
				if err := p.Submit(func() { <-block }); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				var g *workerpool.Group
				if onSub {
					g = sub.Group(ctx)
				} else {
					g = p.Group(ctx)
				}
				var ran atomic.Int32
				for range 5 {
					g.Go(func(context.Context) error { ran.Add(1); return nil })
				}
				synctest.Wait()
				if w := p.Status().Waiting; w != 5 {
					t.Fatalf("Waiting = %d before cancel, want 5", w)
				}
				cancel() // Wait not called
				synctest.Wait()
				s := p.Status()
				if s.Waiting != 0 || s.Canceled != 5 {
					t.Errorf("after the group's ctx is done (no Wait): pool %s; want Waiting=0 Canceled=5", fmtStatus(s))
				}
				if onSub {
					ss := sub.Status()
					if ss.Waiting != 0 || ss.Canceled != 5 {
						t.Errorf("sub-pool: %s; want Waiting=0 Canceled=5", fmtStatus(ss))
					}
				}
				close(block)
				g.Wait()
				p.StopWait()
				if ran.Load() != 0 {
					t.Errorf("%d skipped tasks ran", ran.Load())
				}
			})
		})
	}
}

// A2. Calls whose ctx ends at the instant they are handed to a worker.
// Afterwards, with nothing running, Pause must return at once ("returns
// once every task handed out before it has finished"), and the pool must
// balance at rest.
func TestCallsCanceledAtHandOffThenPause(t *testing.T) {
	for round := range 20 {
		p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
		var running atomic.Int64
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					ctx, cancel := context.WithCancel(context.Background())
					if (i+g)%2 == 0 {
						go cancel()
					} else {
						time.AfterFunc(time.Duration(i%3)*time.Microsecond, cancel)
					}
					workerpool.Call(ctx, p, func(context.Context) (int, error) {
						running.Add(1)
						defer running.Add(-1)
						return 0, nil
					})
					cancel()
				}
			}()
		}
		wg.Wait()
		// A Call that gave up returns without waiting for fn, which may
		// still be on its way to start: Pause waits for every task handed
		// out, so once it returns the pool is at rest.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		p.Pause(ctx)
		took := time.Since(start)
		s := p.Status()
		cancel()
		p.Stop()
		if !balanced(s) || s.Busy != 0 || s.Waiting != 0 || running.Load() != 0 {
			t.Errorf("round %d: not balanced at rest: %s, %d running", round, fmtStatus(s), running.Load())
		}
		if took > time.Second {
			t.Fatalf("round %d: Pause on an idle pool took %v (returned only when its ctx ended); status %s", round, took, fmtStatus(s))
		}
	}
}

// lateCtx is a context that becomes done right after its first Err check:
// a deadline that passes between Call's check of ctx and its submission.
type lateCtx struct {
	context.Context
	checks atomic.Int32
	done   chan struct{}
}

func newLateCtx() *lateCtx {
	c := &lateCtx{Context: context.Background(), done: make(chan struct{})}
	close(c.done)
	return c
}
func (c *lateCtx) Done() <-chan struct{} { return c.done }
func (c *lateCtx) Err() error {
	if c.checks.Add(1) == 1 {
		return nil
	}
	return context.DeadlineExceeded
}

// A2b. The same, deterministic: one Call whose ctx ends as it is handed
// to a parked worker, on one P, in a bubble. Then Pause on the idle pool.
func TestCallSkippedByItsWorkerThenPauseHangs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMinWorkers(1))
		defer p.Stop()
		synctest.Wait() // the worker is parked
		var ran atomic.Bool
		_, err := workerpool.Call(newLateCtx(), p, func(context.Context) (int, error) { ran.Store(true); return 1, nil })
		synctest.Wait()
		s := p.Status()
		t.Logf("Call: %v, fn ran: %v; %s", err, ran.Load(), fmtStatus(s))
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		p.Pause(ctx)
		if took := time.Since(start); took > 0 {
			t.Errorf("Pause on an idle pool returned only when its ctx ended, after %v (bubble time)", took)
		}
	})
}

// A2c. Side effect of the same skip on reaping (promise 8): a worker idle
// for the idle timeout exits within two timeouts.
func TestCallSkippedByItsWorkerThenNoReaping(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, withCall := range []bool{false, true} {
		t.Run(fmt.Sprintf("call=%v", withCall), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1, workerpool.WithIdleTimeout(time.Second))
				defer p.Stop()
				p.SubmitWait(func() {}) // start a worker; it parks
				synctest.Wait()
				if withCall {
					workerpool.Call(newLateCtx(), p, func(context.Context) (int, error) { return 1, nil })
				}
				synctest.Wait()
				time.Sleep(10 * time.Second)
				synctest.Wait()
				if s := p.Status(); s.Workers != 0 {
					t.Errorf("after 10 idle timeouts: Workers=%d, want 0", s.Workers)
				}
			})
		})
	}
}

// A3. Calls waiting on a sub-pool at its limit give up at the same time as
// the sub-pool (or the pool) is stopped. Nothing may be counted twice: at
// rest Submitted == Completed + Abandoned + Canceled + Waiting + Busy, for
// the pool and the sub-pool.
func TestCallsGivingUpRaceStops(t *testing.T) {
	for _, which := range []string{"sub.Stop", "pool.Stop", "pool.Shutdown"} {
		t.Run(which, func(t *testing.T) {
			bad := 0
			const rounds = 200
			for round := range rounds {
				p := workerpool.New(2)
				sub := p.Subpool("s", 1)
				block := make(chan struct{})
				sub.Submit(func() { <-block })
				const calls = 20
				var ready, done sync.WaitGroup
				ctx, cancel := context.WithCancel(context.Background())
				var ran atomic.Int32
				for range calls {
					ready.Add(1)
					done.Add(1)
					go func() {
						defer done.Done()
						ready.Done()
						workerpool.Call(ctx, sub, func(context.Context) (int, error) { ran.Add(1); return 0, nil })
					}()
				}
				ready.Wait()
				for sub.Status().Submitted != calls+1 {
					runtime.Gosched()
				}
				stopped := make(chan struct{})
				go func() {
					defer close(stopped)
					switch which {
					case "sub.Stop":
						sub.Stop()
					case "pool.Stop":
						p.Stop()
					case "pool.Shutdown":
						sctx, c := context.WithCancel(context.Background())
						c()
						p.Shutdown(sctx)
					}
				}()
				cancel()
				close(block)
				done.Wait()
				<-stopped
				p.StopWait()
				ps, ss := p.Status(), sub.Status()
				if !balanced(ps) || !balanced(ss) {
					bad++
					if bad <= 3 {
						t.Errorf("round %d: at rest, pool %s; sub-pool %s", round, fmtStatus(ps), fmtStatus(ss))
					}
				}
				if ran.Load() != 0 && which != "sub.Stop" {
					// a Call may legitimately have started before the stop
				}
			}
			if bad > 0 {
				t.Errorf("%d/%d rounds unbalanced", bad, rounds)
			}
		})
	}
}

// A4. Group.Go (pool or sub-pool) racing the group's ctx ending, on a
// paused pool: once the ctx is done every queued task leaves the queue at
// once (Waiting 0), and at rest the pool balances.
func TestGroupGoRacingItsCtxOnAPausedPool(t *testing.T) {
	for _, onSub := range []bool{false, true} {
		t.Run(fmt.Sprintf("subpool=%v", onSub), func(t *testing.T) {
			bad, stayed := 0, 0
			const rounds = 100
			for round := range rounds {
				p := workerpool.New(4)
				sub := p.Subpool("s", 2)
				pctx, unpause := context.WithCancel(context.Background())
				p.Pause(pctx)
				ctx, cancel := context.WithCancel(context.Background())
				var g *workerpool.Group
				if onSub {
					g = sub.Group(ctx)
				} else {
					g = p.Group(ctx)
				}
				var ran atomic.Int32
				var wg sync.WaitGroup
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 10 {
							g.Go(func(context.Context) error { ran.Add(1); return nil })
						}
					}()
				}
				time.AfterFunc(time.Duration(round%20)*time.Microsecond, cancel)
				wg.Wait()
				g.Wait() // the ctx is done: it skips every queued task
				// Let any in-flight request settle: up to 50ms.
				s := p.Status()
				for deadline := time.Now().Add(50 * time.Millisecond); (s.Waiting != 0 || !balanced(s)) && time.Now().Before(deadline); s = p.Status() {
					time.Sleep(time.Millisecond)
				}
				if s.Waiting != 0 {
					stayed++
					if stayed <= 2 {
						t.Errorf("round %d: a task stayed in the queue after its group's ctx was done and Wait returned: %s", round, fmtStatus(s))
					}
				}
				if s.Waiting != 0 || !balanced(s) {
					bad++
					if bad <= 3 {
						t.Errorf("round %d: paused pool, group ctx done and Wait returned: %s; sub %s", round, fmtStatus(s), fmtStatus(sub.Status()))
					}
				}
				unpause()
				p.StopWait()
				if ran.Load() != 0 {
					t.Errorf("round %d: %d tasks ran after their group's ctx was done", round, ran.Load())
				}
			}
			if bad > 0 {
				t.Errorf("%d/%d rounds: a task stayed in the queue (%d rounds), or the counts did not balance", bad, rounds, stayed)
			}
		})
	}
}

// A4b. Deterministic: a Group.Go waiting for room in a full bounded queue
// (Block) when the group's ctx ends. The task was never accepted, so it
// must not be counted in Canceled ("accepted tasks that never started").
func TestGroupGoBlockedForRoomIsNotCanceled(t *testing.T) {
	// On one P the group's AfterFunc runs before the woken Go goroutine.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1))
		defer p.Stop()
		block := make(chan struct{})
		p.Submit(func() { <-block })
		p.Submit(func() {}) // fills the queue
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		g := p.Group(ctx)
		went := make(chan struct{})
		go func() {
			defer close(went)
			g.Go(func(context.Context) error { return nil }) // waits for room
		}()
		synctest.Wait()
		cancel()
		<-went
		synctest.Wait()
		close(block)
		g.Wait()
		p.StopWait()
		s := p.Status()
		t.Logf("Skipped=%d; %s", g.Skipped(), fmtStatus(s))
		if !balanced(s) {
			t.Errorf("at rest, not balanced: %s", fmtStatus(s))
		}
	})
}

// A5. Every way into a sub-pool (Submit, TrySubmit, SubmitCtx, SubmitKey,
// SubmitWait, Go, Call, CallWith, Group.Go, Group.TryGo, Map, Local.Submit)
// under every overflow policy, with a bounded queue, Calls cut short,
// panics and Goexit, while the pool is paused, resized and one sub-pool is
// stopped: no sub-pool ever runs more than its limit, the workers never
// more than the maximum, a stopped sub-pool's Stop returns with none of its
// tasks running, later submissions get ErrStopped, and all balances.
func TestSubpoolLimitsUnderEveryPathAndPolicy(t *testing.T) {
	for _, ov := range []workerpool.Overflow{workerpool.Block, workerpool.Reject, workerpool.CallerRuns} {
		for _, giveUps := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/giveups=%v", ov, giveUps), func(t *testing.T) {
				for round := range 6 {
					attackLimitsRound(t, ov, round, giveUps)
				}
			})
		}
	}
}

func attackLimitsRound(t *testing.T, ov workerpool.Overflow, round int, giveUps bool) {
	const maxW = 4
	p := workerpool.New(maxW, workerpool.WithMaxWaiting(3), workerpool.WithOverflow(ov),
		workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
	limits := []int{1, 2, 3}
	subs := make([]*workerpool.Subpool, len(limits))
	watch := make([]*peakCounter, len(limits))
	for i, l := range limits {
		subs[i] = p.Subpool(fmt.Sprint("s", i), l)
		watch[i] = new(peakCounter)
	}
	var all peakCounter
	local := workerpool.NewLocal(func() (int, error) { return 0, nil }, nil)
	body := func(i, k int) {
		watch[i].enter()
		all.enter()
		defer all.leave()
		defer watch[i].leave()
		// Without give-ups, Group and Map tasks neither panic nor Goexit:
		// a failure would cancel their context, and the queued ones would
		// be given up.
		if giveUps || (k%12 != 8 && k%12 != 9) {
			switch k % 13 {
			case 5:
				panic("boom")
			case 7:
				runtime.Goexit()
			}
		}
		if k%3 == 0 {
			time.Sleep(20 * time.Microsecond)
		}
		runtime.Gosched()
	}
	stopCh := make(chan struct{})
	var wg sync.WaitGroup
	var stoppedSub atomic.Bool
	var afterStop atomic.Int32 // submissions accepted by sub 0 after its Stop returned
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stopCh:
					return
				default:
				}
				i := (g + k) % len(subs)
				s := subs[i]
				was := stoppedSub.Load() && i == 0
				fn := func() { body(i, k) }
				var err error
				ctx, cancel := context.WithCancel(context.Background())
				if giveUps {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(k%4)*50*time.Microsecond)
				}
				op := k % 12
				if !giveUps && i == 0 && (op == 8 || op == 9) {
					// A stop that drops a Group's or Map's task fails the
					// group, which gives up its other tasks: no give-ups here.
					op = 0
				}
				switch op {
				case 0:
					err = s.Submit(fn)
				case 1:
					err = s.TrySubmit(fn)
				case 2:
					err = s.SubmitCtx(ctx, fn)
				case 3:
					err = s.SubmitKey(fmt.Sprint(k%3), fn)
				case 4:
					err = s.SubmitWait(fn)
				case 5:
					_, err = workerpool.Go(s, func() (int, error) { fn(); return 0, nil }).Wait()
				case 6:
					_, err = workerpool.Call(ctx, s, func(context.Context) (int, error) { fn(); return 0, nil })
				case 7:
					_, err = workerpool.CallWith(ctx, s, local, func(context.Context, int) (int, error) { fn(); return 0, nil })
				case 8:
					gr := s.Group(ctx)
					gr.Go(func(context.Context) error { fn(); return nil })
					gr.TryGo(func(context.Context) error { fn(); return nil })
					err = gr.Wait()
				case 9:
					_, err = workerpool.Map(ctx, s, []int{1, 2, 3, 4}, func(context.Context, int) (int, error) { fn(); return 0, nil })
				case 10:
					err = local.Submit(s, func(int) { fn() })
				case 11:
					err = s.Submit(fn)
				}
				cancel()
				if was && err == nil {
					afterStop.Add(1)
				}
			}
		}()
	}
	// Control: pause, resize, then stop sub-pool 0.
	for j := range 30 {
		switch j % 5 {
		case 0:
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
			p.Pause(ctx)
			cancel()
		case 1:
			p.Resize(1 + j%maxW)
		case 2:
			p.Resize(maxW)
		}
		time.Sleep(100 * time.Microsecond)
	}
	sub0 := subs[0]
	sub0.Stop()
	if n := watch[0].now.Load(); n != 0 {
		t.Errorf("round %d: Subpool.Stop returned with %d of its tasks running", round, n)
	}
	stoppedSub.Store(true)
	if err := sub0.Submit(func() {}); !errors.Is(err, workerpool.ErrStopped) {
		t.Errorf("round %d: a submission after Subpool.Stop: %v", round, err)
	}
	time.Sleep(2 * time.Millisecond)
	close(stopCh)
	wg.Wait()
	p.StopWait()
	if n := afterStop.Load(); n != 0 {
		t.Errorf("round %d: %d submissions to the stopped sub-pool were accepted", round, n)
	}
	for i, w := range watch {
		if int(w.peak.Load()) > limits[i] {
			t.Errorf("round %d: sub-pool %d (limit %d) ran %d at once", round, i, limits[i], w.peak.Load())
		}
	}
	if ov != workerpool.CallerRuns && all.peak.Load() > maxW {
		t.Errorf("round %d: %d sub-pool tasks ran at once, maximum %d", round, all.peak.Load(), maxW)
	}
	ps := p.Status()
	if !balanced(ps) {
		t.Errorf("round %d: pool not balanced at rest: %s", round, fmtStatus(ps))
	}
	for i, s := range subs {
		if ss := s.Status(); !balanced(ss) {
			t.Errorf("round %d: sub-pool %d not balanced at rest: %s", round, i, fmtStatus(ss))
		}
	}
}

// A6. A pool task (or another sub-pool's task) stops a busy sub-pool,
// with running and waiting tasks, while the pool's Stop, StopWait or
// Shutdown runs and another sub-pool's task runs on: Subpool.Stop or
// StopWait returns once its own tasks have ended, whatever the rest does.
func TestBusySubpoolStoppedFromATaskWhileThePoolStops(t *testing.T) {
	for _, poolStop := range []string{"StopWait", "Stop", "Shutdown", "none"} {
		for _, subStop := range []string{"Stop", "StopWait"} {
			for _, from := range []string{"pool", "otherSub"} {
				name := fmt.Sprintf("pool.%s/sub.%s/from=%s", poolStop, subStop, from)
				t.Run(name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						p := workerpool.New(4)
						subA := p.Subpool("A", 1)
						subB := p.Subpool("B", 2)
						holdA, holdX := make(chan struct{}), make(chan struct{})
						var runningA atomic.Int32
						var ranA atomic.Int32
						for range 3 {
							subA.Submit(func() {
								runningA.Add(1)
								defer runningA.Add(-1)
								ranA.Add(1)
								<-holdA
							})
						}
						subB.Submit(func() { <-holdX }) // the rest of the pool: runs on and on
						synctest.Wait()
						stopReturned := make(chan int32, 1)
						stopper := func() {
							if subStop == "Stop" {
								subA.Stop()
							} else {
								subA.StopWait()
							}
							stopReturned <- runningA.Load()
						}
						if from == "pool" {
							if err := p.Submit(stopper); err != nil {
								t.Fatal(err)
							}
						} else {
							if err := subB.Submit(stopper); err != nil {
								t.Fatal(err)
							}
						}
						synctest.Wait()
						poolDone := make(chan struct{})
						go func() {
							defer close(poolDone)
							switch poolStop {
							case "StopWait":
								p.StopWait()
							case "Stop":
								p.Stop()
							case "Shutdown":
								ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
								defer cancel()
								p.Shutdown(ctx)
							}
						}()
						synctest.Wait()
						if err := subA.Submit(func() {}); !errors.Is(err, workerpool.ErrStopped) {
							t.Errorf("submission to a stopping sub-pool: %v", err)
						}
						close(holdA) // the sub-pool's own tasks end; X runs on
						synctest.Wait()
						select {
						case n := <-stopReturned:
							if n != 0 {
								t.Errorf("Subpool.%s returned with %d of its tasks running", subStop, n)
							}
						default:
							t.Errorf("Subpool.%s has not returned though its tasks ended (ran %d); the other sub-pool's task still runs", subStop, ranA.Load())
						}
						if st := subA.Status(); st.State != workerpool.Stopped || st.Busy != 0 || st.Waiting != 0 || !balanced(st) {
							t.Errorf("sub-pool A: State=%v %s", st.State, fmtStatus(st))
						}
						close(holdX)
						synctest.Wait()
						<-poolDone
						p.Stop()
						if ps := p.Status(); !balanced(ps) {
							t.Errorf("pool at rest: %s", fmtStatus(ps))
						}
					})
				})
			}
		}
	}
}

// A8. Thousands of Calls (pool and sub-pools, some panicking, some calling
// Goexit, some cut short before or while they run) racing Pause, Resize,
// a sub-pool's Stop and the pool's Stop. Per Call: fn runs at most once;
// a nil error means fn ran and returned; ErrStopped means fn never ran; a
// panic comes back as *PanicError. A sub-pool's limit holds throughout.
func TestThousandsOfCallsRacingControl(t *testing.T) {
	for round := range 8 {
		const maxW = 4
		p := workerpool.New(maxW, workerpool.WithMaxWaiting(16))
		subs := []*workerpool.Subpool{p.Subpool("a", 1), p.Subpool("b", 2)}
		watches := []*peakCounter{new(peakCounter), new(peakCounter)}
		type rec struct {
			runs atomic.Int32
			err  error
		}
		const n = 1500
		recs := make([]rec, n)
		var returned atomic.Int32
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += 6 {
					r := &recs[i]
					var s workerpool.Submitter = p
					var lw *peakCounter
					if k := i % 3; k < 2 {
						s, lw = subs[k], watches[k]
					}
					ctx, cancel := context.WithCancel(context.Background())
					switch i % 4 {
					case 1:
						go cancel()
					case 2:
						time.AfterFunc(time.Duration(i%50)*time.Microsecond, cancel)
					}
					_, r.err = workerpool.Call(ctx, s, func(ctx context.Context) (int, error) {
						r.runs.Add(1)
						if lw != nil {
							lw.enter()
							defer lw.leave()
						}
						switch i % 17 {
						case 3:
							panic(i)
						case 5:
							runtime.Goexit()
						case 7:
							if i%4 == 1 || i%4 == 2 {
								<-ctx.Done() // cut short while it runs
							}
						}
						runtime.Gosched()
						return i, nil
					})
					cancel()
					returned.Add(1)
				}
			}()
		}
		// Control, until three quarters of the Calls have returned.
		for j := 0; returned.Load() < n*3/4; j++ {
			switch j % 4 {
			case 0:
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Microsecond)
				p.Pause(ctx)
				cancel()
			case 1:
				p.Resize(1 + j%maxW)
			case 2:
				p.Resize(maxW)
			case 3:
				if j == 7 {
					subs[0].Stop()
					if n := watches[0].now.Load(); n != 0 {
						t.Errorf("round %d: Subpool.Stop returned with %d of its Calls' fn running", round, n)
					}
				}
			}
			time.Sleep(50 * time.Microsecond)
		}
		if round%2 == 0 {
			p.Stop()
		} else {
			p.StopWait()
		}
		wg.Wait()
		for i := range recs {
			r := &recs[i]
			runs := r.runs.Load()
			var pe *workerpool.PanicError
			switch {
			case runs > 1:
				t.Errorf("round %d: Call %d's fn ran %d times", round, i, runs)
			case r.err == nil && runs != 1 && i%17 != 5:
				t.Errorf("round %d: Call %d returned nil but fn ran %d times", round, i, runs)
			case errors.Is(r.err, workerpool.ErrStopped) && runs != 0:
				t.Errorf("round %d: Call %d returned ErrStopped but fn ran", round, i)
			case errors.As(r.err, &pe) && (runs != 1 || pe.Value != i):
				t.Errorf("round %d: Call %d: %v, runs %d", round, i, r.err, runs)
			case r.err != nil && !errors.Is(r.err, workerpool.ErrStopped) && !errors.Is(r.err, context.Canceled) && pe == nil:
				t.Errorf("round %d: Call %d: unexpected %v", round, i, r.err)
			}
			if i%17 == 3 && runs == 1 && pe == nil && !errors.Is(r.err, context.Canceled) {
				t.Errorf("round %d: Call %d panicked but returned %v", round, i, r.err)
			}
		}
		for k, w := range watches {
			if int(w.peak.Load()) > k+1 {
				t.Errorf("round %d: sub-pool %d ran %d Calls at once, limit %d", round, k, w.peak.Load(), k+1)
			}
		}
		var ok, stopped, canceled, panicked int
		for i := range recs {
			var pe *workerpool.PanicError
			switch err := recs[i].err; {
			case err == nil:
				ok++
			case errors.Is(err, workerpool.ErrStopped):
				stopped++
			case errors.Is(err, context.Canceled):
				canceled++
			case errors.As(err, &pe):
				panicked++
			}
		}
		ps := p.Status()
		t.Logf("round %d: ok %d, ErrStopped %d, Canceled %d, panicked %d; balanced %v: %s", round, ok, stopped, canceled, panicked, balanced(ps), fmtStatus(ps))
	}
}

// A9. Calls (and a Group's and a Map's tasks) given up in every place a
// task can wait: the hand-off buffer, the lane behind it, a sub-pool at its
// limit, a paused pool, a stopping pool (StopWait). Each leaves the queue
// at once: Waiting drops (pool and sub-pool), Canceled counts it, a
// bounded queue has room again, and it never runs.
func TestGiveUpFromEveryPlace(t *testing.T) {
	places := []string{"buffer", "lane", "subAtLimit", "paused", "pausedSub", "stopWaiting"}
	kinds := []string{"Call", "Group", "Map"}
	for _, place := range places {
		for _, kind := range kinds {
			t.Run(place+"/"+kind, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const bound = 8
					p := workerpool.New(1, workerpool.WithMaxWaiting(bound))
					defer p.Stop()
					sub := p.Subpool("s", 1)
					block := make(chan struct{})
					var to workerpool.Submitter = p
					switch place {
					case "buffer", "lane", "stopWaiting":
						p.Submit(func() { <-block })
					case "subAtLimit":
						p2 := workerpool.New(4, workerpool.WithMaxWaiting(bound))
						defer p2.Stop()
						p, sub = p2, p2.Subpool("s", 1)
						sub.Submit(func() { <-block })
						to = sub
					case "paused", "pausedSub":
						pctx, unpause := context.WithCancel(context.Background())
						defer unpause()
						p.Pause(pctx)
						if place == "pausedSub" {
							to = sub
						}
					}
					if place == "lane" {
						// Something in the buffer ahead of it.
						p.Submit(func() {})
					}
					synctest.Wait()
					before := p.Status()
					ctx, cancel := context.WithCancel(context.Background())
					var ran atomic.Int32
					out := make(chan error, 1)
					const items = 3
					switch kind {
					case "Call":
						go func() {
							_, err := workerpool.Call(ctx, to, func(context.Context) (int, error) { ran.Add(1); return 0, nil })
							out <- err
						}()
					case "Group":
						var g *workerpool.Group
						if s, ok := to.(*workerpool.Subpool); ok {
							g = s.Group(ctx)
						} else {
							g = to.(*workerpool.Pool).Group(ctx)
						}
						for range items {
							g.Go(func(context.Context) error { ran.Add(1); return nil })
						}
						go func() { out <- g.Wait() }()
					case "Map":
						go func() {
							_, err := workerpool.Map(ctx, to, make([]int, items), func(context.Context, int) (int, error) { ran.Add(1); return 0, nil })
							out <- err
						}()
					}
					synctest.Wait()
					queued := p.Status().Waiting - before.Waiting
					if queued <= 0 {
						t.Fatalf("nothing queued: before %s, now %s", fmtStatus(before), fmtStatus(p.Status()))
					}
					stopped := make(chan struct{})
					if place == "stopWaiting" {
						go func() { p.StopWait(); close(stopped) }()
						synctest.Wait()
					}
					cancel()
					synctest.Wait()
					select {
					case err := <-out:
						if !errors.Is(err, context.Canceled) {
							t.Errorf("%s returned %v, want context.Canceled", kind, err)
						}
					default:
						t.Errorf("%s has not returned after its ctx was done", kind)
					}
					s := p.Status()
					if s.Waiting != before.Waiting || s.Canceled != before.Canceled+uint64(queued) {
						t.Errorf("after cancel: queued %d; before %s; now %s", queued, fmtStatus(before), fmtStatus(s))
					}
					if place != "stopWaiting" {
						if err := p.TrySubmit(func() {}); err != nil {
							// TrySubmit goes to the pool's own lane; the bound is shared.
							if s.Waiting < bound {
								t.Errorf("TrySubmit with Waiting=%d < bound: %v", s.Waiting, err)
							}
						}
					}
					if to == sub {
						if ss := sub.Status(); ss.Waiting != 0 || !balanced(ss) {
							t.Errorf("sub-pool after cancel: %s", fmtStatus(ss))
						}
					}
					close(block)
					synctest.Wait()
					if place == "stopWaiting" {
						<-stopped
					}
					p.Stop()
					if ran.Load() != 0 {
						t.Errorf("%d given-up tasks ran", ran.Load())
					}
					if ps := p.Status(); !balanced(ps) {
						t.Errorf("at rest: %s", fmtStatus(ps))
					}
				})
			})
		}
	}
}

// A10. A Call on a sub-pool at limit 1, cut short while its fn runs: Call
// returns ctx.Err() at once, the worker stays Busy (pool and sub-pool) and
// the sub-pool's place stays taken until fn returns: the next task of the
// sub-pool does not start beside it.
func TestCallCutWhileRunningKeepsItsSubpoolPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.Stop()
		sub := p.Subpool("s", 1)
		ctx, cancel := context.WithCancel(context.Background())
		release := make(chan struct{})
		var fnDone atomic.Bool
		out := make(chan error, 1)
		go func() {
			_, err := workerpool.Call(ctx, sub, func(context.Context) (int, error) {
				<-release // ignores ctx, on purpose
				fnDone.Store(true)
				return 1, nil
			})
			out <- err
		}()
		synctest.Wait()
		var next atomic.Bool
		sub.Submit(func() {
			if !fnDone.Load() {
				t.Error("the sub-pool's next task started beside the Call's fn")
			}
			next.Store(true)
		})
		cancel()
		synctest.Wait()
		select {
		case err := <-out:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Call: %v", err)
			}
		default:
			t.Fatal("Call did not return at once")
		}
		if s, ss := p.Status(), sub.Status(); s.Busy != 1 || ss.Busy != 1 || ss.Waiting != 1 {
			t.Errorf("while fn runs on: pool %s; sub %s", fmtStatus(s), fmtStatus(ss))
		}
		close(release)
		synctest.Wait()
		if !next.Load() {
			t.Error("the next task did not run once fn returned")
		}
		if s, ss := p.Status(), sub.Status(); !balanced(s) || !balanced(ss) || s.Canceled != 0 || s.Completed != 2 {
			t.Errorf("at rest: pool %s; sub %s", fmtStatus(s), fmtStatus(ss))
		}
	})
}

// A12. Subpool.StopWait waiting on a paused pool, then Subpool.Stop from
// another sub-pool's task: Stop drops what is left (returning it, in
// acceptance order, keyed or not), StopWait returns too, both once the
// sub-pool's running task has ended, while the pool stays paused.
func TestSubpoolStopEscalatesStopWaitOnAPausedPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.Stop()
		sub := p.Subpool("s", 1)
		other := p.Subpool("o", 1)
		hold := make(chan struct{})
		sub.Submit(func() { <-hold })
		synctest.Wait()
		var order []int
		var mu sync.Mutex
		for i := range 4 {
			f := func() { mu.Lock(); order = append(order, i); mu.Unlock() }
			if i%2 == 0 {
				sub.SubmitKey(fmt.Sprint("k", i%3), f)
			} else {
				sub.Submit(f)
			}
		}
		// The stopper is queued on the other sub-pool before the pause.
		stopperIn := make(chan struct{})
		var dropped []func()
		stopDone := make(chan struct{})
		other.Submit(func() {
			close(stopperIn)
			<-stopperIn
			time.Sleep(time.Second)
			dropped = sub.Stop()
			close(stopDone)
		})
		synctest.Wait()
		pctx, unpause := context.WithCancel(context.Background())
		defer unpause()
		pauseDone := make(chan struct{})
		go func() { p.Pause(pctx); close(pauseDone) }()
		swDone := make(chan struct{})
		go func() { sub.StopWait(); close(swDone) }()
		synctest.Wait()
		time.Sleep(2 * time.Second) // the stopper calls Stop
		synctest.Wait()
		select {
		case <-stopDone:
			t.Error("Subpool.Stop returned while its task still runs")
		default:
		}
		close(hold)
		synctest.Wait()
		select {
		case <-stopDone:
		default:
			t.Fatal("Subpool.Stop did not return once its task ended")
		}
		select {
		case <-swDone:
		default:
			t.Error("Subpool.StopWait did not return after Stop dropped the rest")
		}
		if len(dropped) != 4 {
			t.Fatalf("Stop returned %d tasks, want 4", len(dropped))
		}
		for _, f := range dropped {
			f()
		}
		if fmt.Sprint(order) != "[0 1 2 3]" {
			t.Errorf("dropped tasks in order %v", order)
		}
		if ss := sub.Status(); ss.State != workerpool.Stopped || !balanced(ss) || ss.Abandoned != 4 {
			t.Errorf("sub-pool: %v %s", ss.State, fmtStatus(ss))
		}
		if s := p.Status(); s.State != workerpool.Paused {
			t.Errorf("pool state %v, want paused", s.State)
		}
	})
}

// A13. A Call from inside a task, on the same pool or sub-pool, all of
// whose places are taken by the caller, with a deadline: it gives up at
// the deadline, its fn never runs, and its task leaves the queue.
func TestCallFromInsideATaskWithADeadline(t *testing.T) {
	for _, onSub := range []bool{false, true} {
		t.Run(fmt.Sprintf("subpool=%v", onSub), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				max := 1
				if onSub {
					max = 3
				}
				p := workerpool.New(max, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
				defer p.Stop()
				sub := p.Subpool("s", 1)
				var to workerpool.Submitter = p
				if onSub {
					to = sub
				}
				var ran atomic.Bool
				var err error
				var took time.Duration
				var inside workerpool.Status
				outer := func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					start := time.Now()
					_, err = workerpool.Call(ctx, to, func(context.Context) (int, error) { ran.Store(true); return 0, nil })
					took = time.Since(start)
					synctest.Wait()
					inside = p.Status()
				}
				if onSub {
					sub.SubmitWait(outer)
				} else {
					p.SubmitWait(outer)
				}
				if !errors.Is(err, context.DeadlineExceeded) || took != time.Second {
					t.Errorf("Call from inside: %v after %v", err, took)
				}
				if ran.Load() {
					t.Error("fn ran")
				}
				if inside.Waiting != 0 || inside.Canceled != 1 {
					t.Errorf("after giving up: %s", fmtStatus(inside))
				}
			})
		})
	}
}
