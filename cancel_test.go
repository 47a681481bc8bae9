package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// grouper is a *Pool or a *Subpool: where a Group or Map sends its tasks.
type grouper interface {
	workerpool.Submitter
	Group(ctx context.Context) *workerpool.Group
}

// heldPools are three ways a pool can hold tasks back from a worker for an
// hour: a pause, a queue behind tasks that run for an hour, and a sub-pool
// at its limit while the pool's workers are free. new returns the pool and
// where the tasks go. The pools reap no workers: the reaping clock would
// tick through the fake hours the held tasks take to end, for nothing.
var heldPools = []struct {
	name string
	new  func(t *testing.T) (*workerpool.Pool, grouper)
}{
	{"paused pool", func(t *testing.T) (*workerpool.Pool, grouper) {
		p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
		ctx, resume := context.WithTimeout(context.Background(), time.Hour)
		t.Cleanup(resume)
		p.Pause(ctx)
		return p, p
	}},
	{"busy shared pool", func(t *testing.T) (*workerpool.Pool, grouper) {
		p := workerpool.New(1, workerpool.WithIdleTimeout(-1))
		require.NoError(t, p.Submit(func() { time.Sleep(time.Hour) }))
		for range 100 { // other users' work, queued ahead
			require.NoError(t, p.Submit(func() { time.Sleep(time.Hour) }))
		}
		return p, p
	}},
	{"sub-pool at its limit", func(t *testing.T) (*workerpool.Pool, grouper) {
		p := workerpool.New(4, workerpool.WithIdleTimeout(-1))
		a := p.Subpool("a", 1)
		require.NoError(t, a.Submit(func() { time.Sleep(time.Hour) }))
		return p, a
	}},
}

func TestGroupWaitAfterCancellationDoesNotWaitForTasksThatWillNotRun(t *testing.T) {
	for _, held := range heldPools {
		t.Run(held.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, to := held.new(t)
				errCause := errors.New("gave up")
				ctx, cancel := context.WithCancelCause(context.Background())
				g := to.Group(ctx)
				for range 5 {
					g.Go(func(context.Context) error { t.Error("a skipped task ran"); return nil })
				}
				synctest.Wait()
				start := time.Now()
				cancel(errCause)
				assert.ErrorIs(t, g.Wait(), errCause)
				assert.Zero(t, time.Since(start), "Wait returned at once")
				assert.Equal(t, 5, g.Skipped())

				p.StopWait() // workers reach the skipped tasks now: none runs
				assert.Equal(t, 5, g.Skipped(), "each skipped task is counted once")
				assert.ErrorIs(t, g.Wait(), errCause)
			})
		})
	}
}

func TestMapAfterCancellationDoesNotWaitForItemsThatWillNotRun(t *testing.T) {
	for _, held := range heldPools {
		t.Run(held.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, to := held.new(t)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				start := time.Now()
				out, err := workerpool.Map(ctx, to, make([]int, 10), func(context.Context, int) (int, error) {
					t.Error("an item ran")
					return 0, nil
				})
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Nil(t, out)
				assert.Equal(t, time.Second, time.Since(start), "Map returned when ctx was done")
				p.StopWait() // workers reach the skipped items now: none runs
			})
		})
	}
}

// A Group whose context is done takes its queued tasks out of the queue at
// once, before Wait is even called: they never run, Waiting drops, and
// Status counts them Canceled.
func TestAGroupsQueuedTasksLeaveTheQueueOnceItsContextIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(8))
		block := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-block }))
		ctx, cancel := context.WithCancel(context.Background())
		g := p.Group(ctx)
		for range 5 {
			g.Go(func(context.Context) error { t.Error("a task ran after its group's context was done"); return nil })
		}
		synctest.Wait()
		require.Equal(t, 5, p.Status().Waiting)

		cancel()
		synctest.Wait()
		s := p.Status()
		assert.Zero(t, s.Waiting, "the group's tasks left the queue")
		assert.Equal(t, uint64(5), s.Canceled)
		for range 8 {
			assert.NoError(t, p.TrySubmit(func() {}), "the bounded queue has its room back")
		}

		assert.ErrorIs(t, g.Wait(), context.Canceled)
		assert.Equal(t, 5, g.Skipped())
		close(block)
		p.StopWait()
		s = p.Status()
		assert.Equal(t, s.Submitted, s.Completed+s.Canceled)
	})
}

// Map's items that have not started when its context is done leave the
// queue at once too.
func TestMapsQueuedItemsLeaveTheQueueOnceItsContextIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.StopWait()
		ctx, cancel := context.WithCancel(context.Background())
		items := make([]int, 4) // the window: twice the two workers
		started, release := make(chan struct{}, 4), make(chan struct{})
		done := make(chan error)
		go func() {
			_, err := workerpool.Map(ctx, p, items, func(ctx context.Context, _ int) (int, error) {
				started <- struct{}{}
				<-release
				return 0, nil
			})
			done <- err
		}()
		synctest.Wait()
		require.Len(t, started, 2, "two items run, two wait")
		require.Equal(t, 2, p.Status().Waiting)
		cancel()
		synctest.Wait()
		s := p.Status()
		assert.Zero(t, s.Waiting, "at once, while the two running items go on")
		assert.Equal(t, uint64(2), s.Canceled, "the two waiting items never ran")
		close(release)
		assert.ErrorIs(t, <-done, context.Canceled)
		assert.Equal(t, uint64(2), p.Status().Completed)
	})
}

// ---------------------------------------------------------------------------
// Calls, Groups and Maps give up wherever their tasks wait, racing a stop,
// and the tasks that stay keep their order.

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

// TestCanceledCallsLeaveKeyedAndUnkeyedOrderIntact: one worker,
// busy. The queue holds, in acceptance order, a mix of Calls (some whose
// contexts end while they wait), keyed and unkeyed tasks. The Calls that
// give up leave; the others keep acceptance order.
func TestCanceledCallsLeaveKeyedAndUnkeyedOrderIntact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		synctest.Wait()
		var l starts
		var cancels []context.CancelFunc
		var wg sync.WaitGroup
		call := func(name string, cancelIt bool) {
			ctx, cancel := context.WithCancel(context.Background())
			if cancelIt {
				cancels = append(cancels, cancel)
			} else {
				t.Cleanup(cancel)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				workerpool.Call(ctx, p, func(context.Context) (int, error) { l.task(name)(); return 0, nil })
			}()
			synctest.Wait() // accepted before the next
		}
		call("c1", true)
		atkNoErr(t, p.SubmitKey("a", l.task("a1")))
		call("c2", false)
		atkNoErr(t, p.Submit(l.task("u1")))
		call("c3", true)
		atkNoErr(t, p.SubmitKey("a", l.task("a2")))
		atkNoErr(t, p.SubmitKey("b", l.task("b1")))
		call("c4", true)
		atkNoErr(t, p.Submit(l.task("u2")))
		for _, c := range cancels {
			c()
		}
		synctest.Wait()
		release()
		p.StopWait()
		wg.Wait()
		// a2 waits for a1, which is handed out before it: with one worker,
		// a1 has ended by the time a2 could go.
		want := []string{"a1", "c2", "u1", "a2", "b1", "u2"}
		if got := l.got(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

// TestLeaversDoNotDisturbTheOrderOfTheRest: as
// TestCanceledCallsLeaveKeyedAndUnkeyedOrderIntact, but with no two
// tasks of one key, so that only the leaving is tested: Calls given up, a
// Group and a Map whose contexts end while their tasks wait, mixed with
// keyed and unkeyed tasks of the pool's own queue and of a sub-pool; then
// a Pause takes the buffer back, and Stop. With one worker held, nothing
// runs: Stop returns the fire-and-forget tasks in acceptance order.
func TestLeaversDoNotDisturbTheOrderOfTheRest(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprint("stop=", stop), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1)
				a := p.Subpool("a", 1)
				release := hold(t, p, 1)
				synctest.Wait()
				var l starts
				var order []string
				var bg sync.WaitGroup
				gctx, gcancel := context.WithCancel(context.Background())
				mctx, mcancel := context.WithCancel(context.Background())
				cctx, ccancel := context.WithCancel(context.Background())
				g := p.Group(gctx)
				ff := func(name string, f func(func()) error) {
					atkNoErr(t, f(l.task(name)))
					order = append(order, name)
				}
				call := func(name string, s workerpool.Submitter) {
					bg.Go(func() {
						workerpool.Call(cctx, s, func(context.Context) (int, error) { l.task(name)(); return 0, nil })
					})
					synctest.Wait()
				}
				call("c1", p)
				ff("k1", func(f func()) error { return p.SubmitKey("k1", f) })
				g.Go(func(context.Context) error { l.task("g1")(); return nil })
				ff("u1", p.Submit)
				bg.Go(func() {
					workerpool.Map(mctx, a, []int{1, 2, 3}, func(_ context.Context, i int) (int, error) { l.task(fmt.Sprint("m", i))(); return i, nil })
				})
				synctest.Wait()
				ff("ak1", func(f func()) error { return a.SubmitKey("k1", f) })
				call("c2", a)
				g.Go(func(context.Context) error { l.task("g2")(); return nil })
				ff("a1", a.Submit)
				call("c3", p)
				ff("k2", func(f func()) error { return p.SubmitKey("k2", f) })
				ff("u2", p.Submit)
				ccancel()
				gcancel()
				mcancel()
				synctest.Wait()
				ctx, resume := context.WithCancel(context.Background())
				go p.Pause(ctx)
				synctest.Wait()
				resume()
				synctest.Wait()
				var got []string
				if stop {
					stopped := make(chan []func())
					go func() { stopped <- p.Stop() }()
					synctest.Wait()
					release()
					fs := <-stopped
					if r := l.got(); len(r) != 0 {
						t.Errorf("ran: %v", r)
					}
					for _, f := range fs {
						f()
					}
					got = l.got()
				} else {
					release()
					p.StopWait()
					got = l.got()
				}
				bg.Wait()
				g.Wait()
				if stop {
					if !slices.Equal(got, order) {
						t.Errorf("Stop returned %v, want %v", got, order)
					}
					return
				}
				// Running: turns between the pool's queue and a's. Both had
				// tasks waiting from the start; the pool's queue first.
				want := []string{"k1", "ak1", "u1", "a1", "k2", "u2"}
				if !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			})
		})
	}
}

// A Call waiting in a sub-pool of a paused pool gives up as the pool stops.
// However the two meet, once both have returned the pool and the sub-pool
// agree: the task is Canceled (or Abandoned, if the stop dropped it first)
// in both, neither counts it Waiting, and both balance.
func TestACallGivingUpAsThePoolStopsIsCountedInItsSubpoolToo(t *testing.T) {
	rounds := 1000
	if raceEnabled {
		rounds /= 4
	}
	for round := range rounds {
		p := workerpool.New(1)
		sub := p.Subpool("s", 1)
		pauseCtx, resume := context.WithCancel(context.Background())
		p.Pause(pauseCtx) // returns at once: nothing runs
		ctx, cancel := context.WithCancel(context.Background())
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			workerpool.Call(ctx, sub, func(context.Context) (int, error) { return 0, nil })
		}()
		for sub.Status().Submitted == 0 {
			runtime.Gosched()
		}
		go cancel()
		p.Stop()
		<-returned
		resume()
		ps, ss := p.Status(), sub.Status()
		if !balanced(ps) || !balanced(ss) || ps.Canceled != ss.Canceled || ps.Abandoned != ss.Abandoned || ss.Waiting != 0 {
			t.Fatalf("round %d: pool %s; sub-pool %s", round, fmtStatus(ps), fmtStatus(ss))
		}
	}
}

// busyWithOne returns a pool of one worker running a task that blocks
// until release is called, once Status shows that task Busy: from then on,
// nothing but the test's own calls moves a count.
func busyWithOne(t *testing.T) (p *workerpool.Pool, release func()) {
	t.Helper()
	p = workerpool.New(1)
	release = hold(t, p, 1)
	for p.Status().Busy != 1 {
		runtime.Gosched()
	}
	return p, release
}

// TestTheCountsBalanceRightAfterAGivenUpCallReturns has a Call give up
// while its task waits behind the one busy worker, on the real scheduler:
// once Call has returned ctx.Err(), Status counts the task Canceled and
// not Waiting, and the counts balance. The dispatcher counted Canceled
// after the Call had returned, so a Status read then did not balance.
func TestTheCountsBalanceRightAfterAGivenUpCallReturns(t *testing.T) {
	for round := range rounds(400) {
		p, release := busyWithOne(t)
		ctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error, 1)
		go func() {
			_, err := workerpool.Call(ctx, p, func(context.Context) (int, error) { return 0, nil })
			errs <- err
		}()
		for p.Status().Submitted < 2 {
			runtime.Gosched()
		}
		cancel()
		require.ErrorIs(t, <-errs, context.Canceled, "the one worker is busy: the Call cannot start")
		s := p.Status()
		release()
		p.StopWait()
		if s.Waiting != 0 || s.Canceled != 1 || !balanced(s) {
			t.Fatalf("round %d: right after Call returned: %s", round, fmtStatus(s))
		}
	}
}

// TestTheCountsBalanceRightAfterACanceledGroupOrMapReturns is the same for
// a Group's Wait and a Map whose context is done while their tasks wait:
// once they have returned, none of the tasks counts Waiting, and the counts
// balance.
func TestTheCountsBalanceRightAfterACanceledGroupOrMapReturns(t *testing.T) {
	for _, how := range []string{"Group.Wait", "Map"} {
		t.Run(how, func(t *testing.T) {
			for round := range rounds(300) {
				p, release := busyWithOne(t)
				ctx, cancel := context.WithCancel(context.Background())
				if how == "Map" {
					done := make(chan struct{})
					go func() {
						defer close(done)
						_, _ = workerpool.Map(ctx, p, make([]int, 8), func(context.Context, int) (int, error) { return 0, nil })
					}()
					for p.Status().Submitted < 1+2 { // Map's window: twice the one worker
						runtime.Gosched()
					}
					cancel()
					<-done
				} else {
					g := p.Group(ctx)
					for range 8 {
						g.Go(func(context.Context) error { return nil })
					}
					cancel()
					assert.ErrorIs(t, g.Wait(), context.Canceled)
				}
				s := p.Status()
				release()
				p.StopWait()
				if s.Waiting != 0 || !balanced(s) {
					t.Fatalf("round %d: right after %s returned: %s", round, how, fmtStatus(s))
				}
			}
		})
	}
}

// TestTheHeapReturnsAfterABurstOfGivenUpTasks: tasks given up behind a
// waiting task stay in the queue, marked, until they reach its front (see
// giving up); once the queue has drained, nothing of them is left (promise
// 10): the scheduler's record of them, a map, which never shrinks, goes
// with its last entry.
func TestTheHeapReturnsAfterABurstOfGivenUpTasks(t *testing.T) {
	const n = 1 << 15
	p := workerpool.New(1)
	defer p.StopWait()
	fn := func(context.Context) error { return nil }
	warm := p.Group(context.Background())
	warm.Go(fn)
	require.NoError(t, warm.Wait())
	before := liveHeap()

	ctx, resume := context.WithCancel(context.Background())
	p.Pause(ctx)
	require.NoError(t, p.Submit(func() {})) // waits ahead of the group's tasks
	gctx, cancel := context.WithCancel(context.Background())
	g := p.Group(gctx)
	for range n {
		g.Go(fn)
	}
	cancel()
	_ = g.Wait()
	resume()
	require.NoError(t, p.SubmitWait(func() {})) // behind the whole queue: it has drained
	g = nil
	grown := int64(liveHeap()) - int64(before)
	assert.Less(t, grown, int64(64<<10), "the heap grew by %d B (%.1f B a task given up) and stays so once the queue drained", grown, float64(grown)/n)
	assert.Equal(t, uint64(n), p.Status().Canceled)
}
