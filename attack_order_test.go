package workerpool_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

// ---------------------------------------------------------------------------
// (a) Order within one queue, keys.

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

// ---------------------------------------------------------------------------
// (b) Turns.

// ---------------------------------------------------------------------------
// (c) Stop.

// ---------------------------------------------------------------------------
// Real scheduler: Stop's cut and returned order, under churn.

// ---------------------------------------------------------------------------
// Side probe: tasks their submitters gave up on (Calls whose ctx ended),
// taken from the hand-off buffer by a worker after the give-up and skipped;
// then the Pause and the reaping that follow.

// atkSkipRound runs 200 Calls on four busy workers and ends their shared ctx
// as the workers come free. It returns once every Call has returned and one
// more task has run: nothing is running or waiting.
func atkSkipRound(t *testing.T, p *workerpool.Pool) {
	gate := make(chan struct{})
	for range 4 {
		atkNoErr(t, p.Submit(func() { <-gate }))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var calls sync.WaitGroup
	for range 200 {
		calls.Go(func() { workerpool.Call(ctx, p, func(context.Context) (int, error) { return 0, nil }) })
	}
	for p.Status().Submitted < 204 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	close(gate)
	calls.Wait()
	atkNoErr(t, p.SubmitWait(func() {}))
}

// TestPauseAfterCallsGaveUp: "Pause ... returns once every task handed
// out before it has finished (or ctx is done first)". Nothing runs when it
// is called, so it must return at once, not when its ctx ends.
func TestPauseAfterCallsGaveUp(t *testing.T) {
	for round := range 30 {
		p := workerpool.New(4)
		atkSkipRound(t, p)
		st := p.Status()
		pctx, pcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		p.Pause(pctx)
		took := time.Since(start)
		pcancel()
		p.Stop()
		if took > 150*time.Millisecond {
			t.Fatalf("round %d: Pause took %v with no task running or waiting (Status before it: Busy %d, Waiting %d, Submitted %d, Completed %d, Canceled %d)",
				round, took, st.Busy, st.Waiting, st.Submitted, st.Completed, st.Canceled)
		}
	}
}

// TestIdleWorkersAreReapedAfterCallsGaveUp: "A worker idle for the
// idle timeout exits, between one and two timeouts after it went idle".
func TestIdleWorkersAreReapedAfterCallsGaveUp(t *testing.T) {
	for round := range rounds(30) {
		p := workerpool.New(4, workerpool.WithIdleTimeout(20*time.Millisecond))
		atkSkipRound(t, p)
		time.Sleep(150 * time.Millisecond) // 7.5 timeouts
		st := p.Status()
		p.Stop()
		if st.Workers != 0 {
			t.Fatalf("round %d: %d idle worker(s) still there 7.5 idle timeouts after the last task (Busy %d, Waiting %d, Canceled %d)", round, st.Workers, st.Busy, st.Waiting, st.Canceled)
		}
	}
}

// ---------------------------------------------------------------------------
// Liveness where the loop waits for a worker's report of a task's end: a
// freed key, a sub-pool under its limit again, a sub-pool's Stop. No
// reaping clock runs (a negative idle timeout), so nothing but the report
// can wake the dispatcher.

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
