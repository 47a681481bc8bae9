package workerpool_test

import (
	"context"
	"fmt"
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

// Tasks given up as a worker takes them from the hand-off buffer: the
// worker skips them. Afterwards the pool is at rest, as if they had left the
// queue: Pause returns at once, idle workers are reaped, the counts balance.

// AttackSkippedTaskAccounting: a Call whose ctx ends just as a worker comes
// free may be taken from the hand-off buffer by the worker after its
// submitter gave up: the worker skips it. Promises then: Pause returns once
// the tasks handed out before it have finished (none is running), and an
// idle worker is reaped within two idle timeouts. (synctest.Test fails the
// outer test at the first failing bubble, so rounds report by value.)
func TestCallGivenUpAsAWorkerTakesIt(t *testing.T) {
	rounds := 300
	pauseStuck, notReaped, skippedSeen := 0, 0, 0
	var first []string
	for range rounds {
		synctest.Test(t, func(*testing.T) {
			const workers, calls = 4, 16
			p := workerpool.New(workers, workerpool.WithIdleTimeout(time.Second))
			defer p.Stop()
			for range workers {
				_ = p.Submit(func() { time.Sleep(time.Second) })
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var ran atomic.Int32
			var wg sync.WaitGroup
			for range calls {
				wg.Go(func() {
					_, _ = workerpool.Call(ctx, p, func(context.Context) (int, error) { ran.Add(1); return 0, nil })
				})
			}
			wg.Wait()
			synctest.Wait()
			// Every Call either ran or was counted Canceled; the pool is at rest.
			if s := p.Status(); s.Canceled == 0 || s.Busy != 0 {
				return
			}
			skippedSeen++
			pctx, pcancel := context.WithTimeout(context.Background(), time.Hour)
			defer pcancel()
			start := time.Now()
			p.Pause(pctx)
			if d := time.Since(start); d > 0 {
				pauseStuck++
				if pauseStuck == 1 {
					first = append(first, fmt.Sprintf("Pause on a pool with no task running returned only when its ctx ended, after %v (fake clock); status %+v", d, p.Status()))
				}
			}
			pcancel()
			time.Sleep(3 * time.Second) // past two idle timeouts
			synctest.Wait()
			if w := p.Status().Workers; w != 0 {
				notReaped++
				if notReaped == 1 {
					first = append(first, fmt.Sprintf("an idle worker was not reaped within two idle timeouts (3s of 1s timeouts): Workers=%d", w))
				}
			}
		})
	}
	t.Logf("rounds %d, Call given up without running %d, Pause stuck %d, not reaped %d", rounds, skippedSeen, pauseStuck, notReaped)
	for _, f := range first {
		t.Error(f)
	}
	if pauseStuck+notReaped > 0 {
		t.Errorf("Pause stuck in %d/%d rounds, worker not reaped in %d/%d rounds", pauseStuck, rounds, notReaped, rounds)
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

func (c *lateCtx) Done() <-chan struct{} { return c.done }

func (c *lateCtx) Err() error {
	if c.checks.Add(1) == 1 {
		return nil
	}
	return context.DeadlineExceeded
}

func newLateCtx() *lateCtx {
	c := &lateCtx{Context: context.Background(), done: make(chan struct{})}
	close(c.done)
	return c
}

// A2b. The same, deterministic: one Call whose ctx ends as it is handed
// to a parked worker, on one P, in a bubble. Then Pause on the idle pool.
func TestPauseReturnsAtOnceAfterAWorkerSkipsAGivenUpCall(t *testing.T) {
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
func TestAnIdleWorkerIsReapedAfterItSkipsAGivenUpCall(t *testing.T) {
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

// TestACallThatGaveUpInTheBufferTakesNoRoomInABoundedQueue has a Call give
// up while its task waits in the hand-off buffer behind another waiting
// task, on a pool of one busy worker and a bound of two: one task waits,
// so there is room for one more, which TrySubmit (under Reject) gets at
// once and Submit (under Block) without waiting. The given-up task's
// revoked hand-off still counted against the bound: TrySubmit said the
// queue was full, and Submit waited until the busy task ended.
func TestACallThatGaveUpInTheBufferTakesNoRoomInABoundedQueue(t *testing.T) {
	for _, overflow := range []workerpool.Overflow{workerpool.Reject, workerpool.Block} {
		t.Run(overflow.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1, workerpool.WithMaxWaiting(2), workerpool.WithOverflow(overflow))
				require.NoError(t, p.Submit(func() { time.Sleep(time.Hour) }))
				synctest.Wait()
				require.NoError(t, p.Submit(func() {})) // waits in the buffer
				ctx, cancel := context.WithCancel(context.Background())
				callErr := make(chan error)
				go func() {
					_, err := workerpool.Call(ctx, p, func(context.Context) (int, error) { return 0, nil })
					callErr <- err
				}()
				synctest.Wait() // the Call's task waits in the buffer too
				cancel()
				require.ErrorIs(t, <-callErr, context.Canceled)
				synctest.Wait()
				require.Equal(t, 1, p.Status().Waiting)

				start := time.Now()
				if overflow == workerpool.Reject {
					assert.NoError(t, p.TrySubmit(func() {}), "one task waits of a bound of two")
				} else {
					assert.NoError(t, p.Submit(func() {}))
				}
				assert.Zero(t, time.Since(start), "accepted at once: one task waits of a bound of two")
				synctest.Wait()
				assert.Equal(t, 2, p.Status().Waiting)
				p.Stop()
			})
		})
	}
}
