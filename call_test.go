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

// Call with a nil context or a nil Submitter panics at once with a message
// that names it, even with a nil fn; the pool accepts nothing.
func TestCallWithANilContextOrSubmitterPanicsNamingIt(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	for _, tc := range nilArgCases("Call", p) {
		t.Run(tc.name, func(t *testing.T) {
			for _, fn := range []func(context.Context) (int, error){
				func(context.Context) (int, error) { return 1, nil }, nil,
			} {
				assert.PanicsWithValue(t, tc.want, func() {
					_, _ = workerpool.Call(tc.ctx, tc.s, fn)
				}, "nil fn: %t", fn == nil)
			}
		})
	}
	assert.Zero(t, p.Status().Submitted)
}

// TestCallUnderRejectReturnsErrQueueFullAtOnce: under Reject a Call whose
// fn finds the bounded queue full returns ErrQueueFull at once, as Go
// does; under Block it waits for room, and under CallerRuns too, as fn
// runs on a worker. (Issue 35: a Call under Reject waited.)
func TestCallUnderRejectReturnsErrQueueFullAtOnce(t *testing.T) {
	for _, o := range []workerpool.Overflow{workerpool.Reject, workerpool.Block, workerpool.CallerRuns} {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(o))
				block := make(chan struct{})
				for range 2 { // one running, one waiting: the queue is full
					require.NoError(t, p.Submit(func() { <-block }))
				}
				synctest.Wait()
				done := make(chan error, 1)
				go func() {
					_, err := workerpool.Call(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
					done <- err
				}()
				synctest.Wait()
				if o == workerpool.Reject {
					assert.ErrorIs(t, <-done, workerpool.ErrQueueFull)
					assert.Equal(t, uint64(1), p.Status().Rejected)
				} else {
					select {
					case err := <-done:
						t.Fatalf("returned %v while the queue was full", err)
					default:
					}
				}
				close(block)
				if o != workerpool.Reject {
					assert.NoError(t, <-done)
				}
				p.StopWait()
			})
		})
	}
}
