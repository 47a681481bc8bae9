package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
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

// A pair is one of MapSeq's pairs, kept by collect.
type pair[R any] struct {
	val R
	err error
}

// collect ranges over seq to its end and returns its pairs.
func collect[R any](seq iter.Seq2[R, error]) []pair[R] {
	var got []pair[R]
	for v, err := range seq {
		got = append(got, pair[R]{v, err})
	}
	return got
}

// upTo returns the items 0, 1, ..., n-1.
func upTo(n int) []int {
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	return items
}

func TestMapSeqYieldsOnePairPerItemInInputOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.Stop()
		items := upTo(100)
		// Later items finish first, so completion order is not input order.
		got := collect(workerpool.MapSeq(context.Background(), p, items, func(_ context.Context, n int) (string, error) {
			time.Sleep(time.Duration(len(items)-n) * time.Millisecond)
			return fmt.Sprint(n * n), nil
		}))
		require.Len(t, got, len(items))
		for i, pr := range got {
			assert.NoError(t, pr.err)
			assert.Equal(t, fmt.Sprint(i*i), pr.val)
		}
	})
}

func TestMapSeqYieldsAPairAsSoonAsItsItemAndEveryEarlierOneEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.Stop()
		start := time.Now()
		// Item 0 takes 1s, item 1 takes 3s, item 2 takes 2s: pair 0 comes
		// at 1s, not after the slowest; pair 2 waits for pair 1, at 3s.
		delays := []time.Duration{time.Second, 3 * time.Second, 2 * time.Second}
		var at []time.Duration
		for _, err := range workerpool.MapSeq(context.Background(), p, delays, func(_ context.Context, d time.Duration) (struct{}, error) {
			time.Sleep(d)
			return struct{}{}, nil
		}) {
			require.NoError(t, err)
			at = append(at, time.Since(start))
		}
		assert.Equal(t, []time.Duration{time.Second, 3 * time.Second, 3 * time.Second}, at)
	})
}

// The window bounds the items submitted and not yet yielded: fn checks that
// its item is within a window of the pairs yielded so far, and the loop's
// body, slow, lets the window fill, and checks the pool's count.
func TestMapSeqKeepsAtMostAWindowOfItemsSubmittedAndNotYielded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window int // 0: the default
		want   int
		sub    bool
	}{
		{"default is twice the pool's size", 0, 6, false},
		{"WithWindow", 5, 5, false},
		{"WithWindow(1)", 1, 1, false},
		{"default on a sub-pool is twice its limit", 0, 4, true},
		{"WithWindow on a sub-pool", 7, 7, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(3)
				defer p.Stop()
				var s workerpool.Submitter = p
				if tc.sub {
					s = p.Subpool("sub", 2)
				}
				var opts []workerpool.MapSeqOption
				if tc.window > 0 {
					opts = append(opts, workerpool.WithWindow(tc.window))
				}
				var yielded, peak atomic.Int64
				var outside atomic.Int64
				n := 200
				seq := workerpool.MapSeq(context.Background(), s, upTo(n), func(_ context.Context, i int) (int, error) {
					if int64(i) >= yielded.Load()+int64(tc.want) {
						outside.Add(1) // submitted beyond the window
					}
					time.Sleep(time.Duration(1+i%3) * time.Millisecond)
					return i, nil
				}, opts...)
				for i, err := range seq {
					require.NoError(t, err)
					// Items 0..i-1 are yielded, i is being yielded.
					out := int64(p.Status().Submitted) - yielded.Load()
					if out > peak.Load() {
						peak.Store(out)
					}
					assert.LessOrEqual(t, out, int64(tc.want), "pair %d", i)
					yielded.Add(1)
					time.Sleep(5 * time.Millisecond) // a slow loop: the window fills
				}
				assert.Zero(t, outside.Load(), "items started beyond the window")
				assert.Equal(t, int64(tc.want), peak.Load(), "the window fills")
				assert.Equal(t, uint64(n), p.Status().Submitted)
			})
		})
	}
}

func TestMapSeqKeepsEveryResultAndEveryError(t *testing.T) {
	p := workerpool.New(8)
	defer p.Stop()
	errBad := errors.New("bad input")
	n := 10_000
	var pairs, errs int
	for r, err := range workerpool.MapSeq(context.Background(), p, upTo(n), func(_ context.Context, i int) (int, error) {
		if i == 999 {
			return 0, fmt.Errorf("job %d: %w", i, errBad)
		}
		return 2 * i, nil
	}) {
		if err != nil {
			errs++
			assert.ErrorIs(t, err, errBad)
			assert.Equal(t, 999, pairs, "the error is item 999's pair")
		} else {
			assert.Equal(t, 2*pairs, r)
		}
		pairs++
	}
	assert.Equal(t, n, pairs)
	assert.Equal(t, 1, errs)
}

func TestMapSeqYieldsAPanicAsPanicErrorAndAGoexitAsZeroAndNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		got := collect(workerpool.MapSeq(context.Background(), p, []string{"a", "", "goexit", "d"}, func(_ context.Context, s string) (byte, error) {
			if s == "goexit" {
				runtime.Goexit()
			}
			return s[0], nil // panics on ""
		}))
		require.Len(t, got, 4)
		assert.Equal(t, pair[byte]{'a', nil}, got[0])
		var pe *workerpool.PanicError
		require.ErrorAs(t, got[1].err, &pe)
		assert.Contains(t, pe.Error(), "index out of range")
		assert.Zero(t, got[1].val)
		assert.Equal(t, pair[byte]{0, nil}, got[2], "Goexit: zero and nil, as Future.Wait")
		assert.Equal(t, pair[byte]{'d', nil}, got[3], "the items after a panic and a Goexit run")
		s := p.Status()
		assert.Equal(t, uint64(4), s.Completed)
		assert.Equal(t, uint64(1), s.Panicked)
	})
}

// Ending the loop early: break (in the first pair, or later), return, a
// panic or a Goexit in the loop's body. The items queued leave the queue,
// counted Canceled; fn's context is cancelled; the loop returns only once
// the running fns have returned, and no fn starts after it.
func TestMapSeqEndingTheLoopCancelsTheRestAndWaitsForRunningFns(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T) // ends the loop's body
		at   int                // the pair at which the body ends the loop
	}{
		{"break in the first pair", nil, 0},
		{"break in a later pair", nil, 3},
		{"panic", func(*testing.T) { panic("body") }, 1},
		{"Goexit", func(*testing.T) { runtime.Goexit() }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// One worker, a window of 8: when pair at is taken, item
				// at+1 runs, and at+2..at+7 wait in the queue.
				p := workerpool.New(1)
				defer p.Stop()
				var started, returned, cancelled, late atomic.Int64
				var over atomic.Bool
				fn := func(ctx context.Context, i int) (int, error) {
					started.Add(1)
					if over.Load() {
						late.Add(1)
					}
					defer returned.Add(1)
					if i <= tc.at {
						return i, nil // ends at once: the next one starts
					}
					select {
					case <-ctx.Done():
						cancelled.Add(1)
						time.Sleep(time.Second) // still the loop waits
					case <-time.After(time.Hour):
					}
					return i, nil
				}
				loop := func() {
					// Not on the test's goroutine: no require here.
					for i, err := range workerpool.MapSeq(context.Background(), p, upTo(100), fn, workerpool.WithWindow(8)) {
						assert.NoError(t, err)
						assert.LessOrEqual(t, i, tc.at)
						if i < tc.at {
							continue
						}
						synctest.Wait() // item at+1 is running
						assert.Equal(t, int64(tc.at+2), started.Load())
						if tc.end == nil {
							break
						}
						tc.end(t)
					}
				}
				done := make(chan any)
				go func() {
					defer close(done)
					defer func() { done <- recover() }()
					loop()
				}()
				v := <-done
				over.Store(true)
				if tc.name == "panic" {
					assert.Equal(t, "body", v, "the body's panic goes on")
				}
				assert.Equal(t, started.Load(), returned.Load(), "the loop returned while an fn ran")
				assert.Equal(t, int64(1), cancelled.Load(), "fn's context is cancelled")
				time.Sleep(time.Hour)
				assert.Zero(t, late.Load(), "an fn started after the loop")
				s := p.Status()
				assert.Equal(t, uint64(6), s.Canceled, "the queued items are Canceled")
				assert.Equal(t, uint64(tc.at+2), s.Completed)
				assert.Zero(t, s.Waiting)
				assertBalanced(t, s)
			})
		})
	}
}

func TestMapSeqYieldsTheContextsCauseForTheItemsNotRunOnceItIsDone(t *testing.T) {
	// The deadline falls at every point of the run, including the instants
	// when no item is queued and the next is not yet handed out.
	for timeout := range 52 { // the 100 items take 50ms on 2 workers
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(2)
			defer p.Stop()
			ctx, cancel := context.WithTimeoutCause(context.Background(), time.Duration(timeout)*time.Millisecond, io.ErrNoProgress)
			defer cancel()
			var ran [100]atomic.Bool
			var running atomic.Int64
			got := collect(workerpool.MapSeq(ctx, p, upTo(100), func(_ context.Context, i int) (int, error) {
				ran[i].Store(true)
				running.Add(1)
				defer running.Add(-1)
				time.Sleep(time.Millisecond) // ignores ctx: the loop waits for it
				return i, nil
			}))
			assert.Zero(t, running.Load(), "the loop returned while an fn ran")
			require.Len(t, got, 100, "one pair per item, ctx or not")
			var notRun uint64
			for i, pr := range got {
				if ran[i].Load() {
					assert.Equal(t, pair[int]{i, nil}, pr, "item %d ran", i)
				} else {
					notRun++
					assert.Equal(t, pair[int]{0, io.ErrNoProgress}, pr, "item %d did not run", i)
				}
			}
			s := p.Status()
			assert.Equal(t, uint64(100)-notRun, s.Completed)
			assert.Equal(t, s.Submitted-s.Completed, s.Canceled, "every item submitted and not run is Canceled")
			// A worker that found an item given up counts it out of
			// Waiting just after: Status is not a synchronization point.
			synctest.Wait()
			assert.Zero(t, p.Status().Waiting)
		})
	}
}

// ctx done while the loop's body runs: the queued items leave the queue at
// once, not when the body asks for the next pair.
func TestMapSeqEmptiesTheQueueAtOnceWhenCtxIsDoneDuringTheBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		defer p.Stop()
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		errGone := errors.New("client gone")
		var calls atomic.Int64
		var got []pair[int]
		for v, err := range workerpool.MapSeq(ctx, p, upTo(20), func(ctx context.Context, i int) (int, error) {
			calls.Add(1)
			if i == 0 {
				return 0, nil
			}
			<-ctx.Done() // item 1 runs until ctx is done
			return -1, context.Cause(ctx)
		}, workerpool.WithWindow(5)) {
			if len(got) == 0 {
				synctest.Wait() // item 1 runs; 2, 3, 4 wait
				require.Equal(t, 3, p.Status().Waiting)
				cancel(errGone)
				synctest.Wait() // the body has not returned yet
				s := p.Status()
				assert.Zero(t, s.Waiting, "the queue is empty at once")
				assert.Equal(t, uint64(3), s.Canceled)
			}
			got = append(got, pair[int]{v, err})
		}
		require.Len(t, got, 20)
		assert.Equal(t, pair[int]{0, nil}, got[0])
		assert.Equal(t, pair[int]{-1, errGone}, got[1], "item 1 ran: fn's own pair")
		for i := 2; i < 20; i++ {
			assert.Equal(t, pair[int]{0, errGone}, got[i], "item %d", i)
		}
		assert.Equal(t, int64(2), calls.Load())
	})
}

// ctx cancelled between two pairs, by the loop's body: the items that
// ended before keep their pairs, even those ended and not yet yielded, and
// so do those running, which the loop waits for.
func TestMapSeqKeepsThePairsOfItemsThatRanWhenCtxIsDoneBetweenPairs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		var got []pair[int]
		for v, err := range workerpool.MapSeq(ctx, p, upTo(40), func(_ context.Context, i int) (int, error) {
			if i >= 8 {
				time.Sleep(time.Hour) // ignores ctx
			}
			return i, nil
		}) {
			got = append(got, pair[int]{v, err})
			if len(got) == 3 {
				// The window is 8: items 3..7 have ended, 8 and 9 run.
				synctest.Wait()
				cancel()
			}
		}
		assert.Equal(t, time.Hour, time.Since(start), "the loop waited for items 8 and 9")
		require.Len(t, got, 40)
		for i := range 10 {
			assert.Equal(t, pair[int]{i, nil}, got[i], "item %d ran", i)
		}
		for i := 10; i < 40; i++ {
			assert.Equal(t, pair[int]{0, context.Canceled}, got[i], "item %d", i)
		}
		assert.Equal(t, uint64(10), p.Status().Submitted, "nothing submitted once ctx was done")
	})
}

func TestMapSeqYieldsErrStoppedForTheItemsAStopDropped(t *testing.T) {
	t.Run("while it streams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(1)
			release := make(chan struct{})
			var calls atomic.Int64
			var got []pair[int]
			for v, err := range workerpool.MapSeq(context.Background(), p, upTo(50), func(_ context.Context, i int) (int, error) {
				calls.Add(1)
				if i == 1 {
					<-release
				}
				return i, nil
			}, workerpool.WithWindow(4)) {
				if len(got) == 0 {
					synctest.Wait() // item 1 runs, 2 and 3 wait in the queue
					stopped := make(chan struct{})
					go func() { p.Stop(); close(stopped) }()
					synctest.Wait()
					close(release) // the running item finishes
					<-stopped
				}
				got = append(got, pair[int]{v, err})
			}
			require.Len(t, got, 50, "no hang, and one pair per item")
			assert.Equal(t, pair[int]{0, nil}, got[0])
			assert.Equal(t, pair[int]{1, nil}, got[1], "the running item finished")
			for i := 2; i < 50; i++ {
				assert.Zero(t, got[i].val, "item %d", i)
				assert.ErrorIs(t, got[i].err, workerpool.ErrStopped, "item %d", i)
			}
			assert.Equal(t, int64(2), calls.Load())
			assert.Equal(t, uint64(2), p.Status().Abandoned, "the queued items dropped")
		})
	})
	t.Run("before it", func(t *testing.T) {
		p := workerpool.New(1)
		p.Stop()
		got := collect(workerpool.MapSeq(context.Background(), p, upTo(3), func(context.Context, int) (int, error) {
			t.Error("ran on a stopped pool")
			return 0, nil
		}))
		assert.Equal(t, []pair[int]{{0, workerpool.ErrStopped}, {0, workerpool.ErrStopped}, {0, workerpool.ErrStopped}}, got)
	})
}

func TestMapSeqOnASubpoolKeepsItsLimitAndStopsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		defer p.Stop()
		sub := p.Subpool("batch", 2)
		var running peakCounter
		var got []pair[int]
		for v, err := range workerpool.MapSeq(context.Background(), sub, upTo(30), func(_ context.Context, i int) (int, error) {
			running.enter()
			defer running.leave()
			time.Sleep(time.Millisecond)
			return i, nil
		}) {
			got = append(got, pair[int]{v, err})
			if len(got) == 10 {
				sub.Stop() // the pool goes on; the sub-pool's items stop
			}
		}
		require.Len(t, got, 30)
		assert.Equal(t, int64(2), running.peak.Load(), "the sub-pool's limit holds")
		for i := range 10 {
			assert.Equal(t, pair[int]{i, nil}, got[i])
		}
		var ran int
		for i := 10; i < 30; i++ {
			if got[i].err == nil {
				ran++ // ran before the stop: the window's running items
				continue
			}
			assert.Zero(t, got[i].val, "item %d", i)
			assert.ErrorIs(t, got[i].err, workerpool.ErrStopped, "item %d", i)
		}
		assert.LessOrEqual(t, ran, 4)
		assert.Equal(t, workerpool.Running, p.Status().State)
	})
}

// MapSeq runs items on workers and waits for room in a bounded queue,
// whatever the overflow policy: nothing is rejected, nothing runs in the
// caller.
func TestMapSeqRunsItemsOnWorkersWhateverTheOverflowPolicy(t *testing.T) {
	for _, o := range []workerpool.Overflow{workerpool.Block, workerpool.Reject, workerpool.CallerRuns} {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The window (4) is larger than the queue (1).
				p := workerpool.New(2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(o))
				defer p.Stop()
				var inCaller atomic.Int64
				got := collect(workerpool.MapSeq(context.Background(), p, upTo(20), func(_ context.Context, i int) (int, error) {
					buf := make([]byte, 64<<10)
					// In the caller, fn would run under the test's collect.
					if strings.Contains(string(buf[:runtime.Stack(buf, false)]), "workerpool_test.collect") {
						inCaller.Add(1)
					}
					time.Sleep(time.Millisecond)
					return i, nil
				}))
				require.Len(t, got, 20)
				for i, pr := range got {
					assert.Equal(t, pair[int]{i, nil}, pr)
				}
				assert.Zero(t, inCaller.Load(), "an item ran in the caller")
				assert.Zero(t, p.Status().Rejected)
			})
		})
	}
}

func TestMapSeqRangedOverTwicePanics(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	var calls atomic.Int64
	seq := workerpool.MapSeq(context.Background(), p, upTo(3), func(_ context.Context, i int) (int, error) {
		calls.Add(1)
		return i, nil
	})
	assert.Len(t, collect(seq), 3)
	assert.PanicsWithValue(t, "workerpool: MapSeq: the iterator was ranged over twice; call MapSeq again to run fn again", func() {
		for range seq {
		}
	})
	assert.Equal(t, int64(3), calls.Load(), "fn ran once per item")
	// Even after a first loop that broke at once, and on an empty slice.
	seq = workerpool.MapSeq(context.Background(), p, nil, func(_ context.Context, i int) (int, error) { return i, nil })
	for range seq {
	}
	assert.Panics(t, func() {
		for range seq {
		}
	})
}

func TestMapSeqSubmitsNothingUntilTheLoopBegins(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	seq := workerpool.MapSeq(context.Background(), p, upTo(3), func(_ context.Context, i int) (int, error) { return i, nil })
	assert.Zero(t, p.Status().Submitted)
	assert.Len(t, collect(seq), 3)
}

func TestMapSeqOfAnEmptySliceYieldsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A paused pool would hold any item: MapSeq must not submit one.
		p := workerpool.New(1)
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		assert.Empty(t, collect(workerpool.MapSeq(context.Background(), p, []int{}, func(context.Context, int) (int, error) {
			t.Error("fn called on no items")
			return 0, nil
		})))
		assert.Zero(t, p.Status().Submitted)
		resume()
		p.StopWait()
	})
}

func TestMapSeqWithANilFuncYieldsErrNilTaskForEveryItem(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	got := collect(workerpool.MapSeq[int, int](context.Background(), p, upTo(3), nil))
	assert.Equal(t, []pair[int]{{0, workerpool.ErrNilTask}, {0, workerpool.ErrNilTask}, {0, workerpool.ErrNilTask}}, got)
	assert.Zero(t, p.Status().Submitted)
}

// MapSeq with a nil context or a nil Submitter panics at once, before the
// loop, even for an empty slice; the pool accepts nothing.
func TestMapSeqWithANilContextOrSubmitterPanicsNamingIt(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	fn := func(_ context.Context, n int) (int, error) { return n, nil }
	for _, tc := range nilArgCases("MapSeq", p) {
		t.Run(tc.name, func(t *testing.T) {
			for _, items := range [][]int{{1, 2}, nil} {
				assert.PanicsWithValue(t, tc.want, func() {
					_ = workerpool.MapSeq(tc.ctx, tc.s, items, fn)
				}, "items %v", items)
			}
		})
	}
	assert.Zero(t, p.Status().Submitted)
}

func TestWithWindowBelowOnePanicsNamingMapSeq(t *testing.T) {
	for _, n := range []int{0, -1} {
		assert.PanicsWithValue(t, fmt.Sprintf("workerpool: MapSeq: window %d < 1", n), func() {
			workerpool.WithWindow(n)
		})
	}
}

// The doc's figures: a call and its loop, over a context that is never
// done and over one that can be.
func TestMapSeqAllocatesNothingPerItem(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	fn := func(_ context.Context, n int) (int, error) { return n, nil }
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		max  float64
	}{
		{"never done", context.Background(), 9},
		{"cancellable", cancellable, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocs := func(n int) float64 {
				items := make([]int, n)
				return testing.AllocsPerRun(50, func() {
					for range workerpool.MapSeq(tc.ctx, p, items, fn) {
					}
				})
			}
			few, many := allocs(1), allocs(300)
			assert.Equal(t, few, many, "allocations per call do not grow with the items")
			assert.LessOrEqual(t, many, tc.max)
			t.Logf("MapSeq and its loop allocate %v objects per call", many)
		})
	}
}

func ExampleMapSeq() {
	p := workerpool.New(4)
	defer p.StopWait()

	words := []string{"pool", "worker", "", "queue"}
	lengths := workerpool.MapSeq(context.Background(), p, words, func(_ context.Context, w string) (int, error) {
		if w == "" {
			return 0, errors.New("empty word")
		}
		return len(w), nil
	})
	// One pair per word, in the order of words, whatever order they ran
	// in; the error of one does not stop the others.
	i := 0
	for n, err := range lengths {
		if err != nil {
			fmt.Printf("%d: %v\n", i, err)
		} else {
			fmt.Printf("%d: %q has %d letters\n", i, words[i], n)
		}
		i++
	}
	// Output:
	// 0: "pool" has 4 letters
	// 1: "worker" has 6 letters
	// 2: empty word
	// 3: "queue" has 5 letters
}

// ---------------------------------------------------------------------------
// Attacks: the promises again, from angles the tests above do not take.

// A loop blocked waiting for room in a full queue, when ctx ends: no hang,
// nothing runs in the caller, and every item yields ctx's cause.
func TestMapSeqBlockedOnAFullQueueGivesUpWhenCtxIsDone(t *testing.T) {
	for _, o := range []workerpool.Overflow{workerpool.Block, workerpool.Reject, workerpool.CallerRuns} {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(o))
				defer p.Stop()
				release := hold(t, p, 1)                // the worker is busy
				require.NoError(t, p.Submit(func() {})) // the queue is full
				ctx, cancel := context.WithTimeoutCause(context.Background(), time.Second, io.ErrNoProgress)
				defer cancel()
				got := collect(workerpool.MapSeq(ctx, p, upTo(5), func(context.Context, int) (int, error) {
					t.Error("an item ran")
					return 0, nil
				}))
				assert.Equal(t, slicesRepeat(pair[int]{0, io.ErrNoProgress}, 5), got)
				release()
				p.StopWait()
				s := p.Status()
				assert.Equal(t, uint64(2), s.Submitted, "no item was accepted")
				assert.Zero(t, s.Rejected)
			})
		})
	}
}

// slicesRepeat returns n copies of v.
func slicesRepeat[V any](v V, n int) []V {
	out := make([]V, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// A paused pool holds the window; ctx's end takes it back at once, and the
// loop returns without waiting for the pause to end.
func TestMapSeqOnAPausedPoolReturnsWhenCtxIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		pause, resume := context.WithCancel(context.Background())
		defer resume()
		p.Pause(pause)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		got := collect(workerpool.MapSeq(ctx, p, upTo(10), func(context.Context, int) (int, error) {
			t.Error("an item ran while paused")
			return 0, nil
		}))
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, slicesRepeat(pair[int]{0, context.DeadlineExceeded}, 10), got)
		s := p.Status()
		assert.Equal(t, uint64(4), s.Canceled, "the window of 4 left the queue")
		assert.Equal(t, workerpool.Paused, s.State)
	})
}

// iter.Pull, stopped after two pairs: stop cancels the rest and waits for
// the running fn, as a break does.
func TestMapSeqPulledAndStoppedWaitsForTheRunningFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		var running atomic.Int64
		next, stop := iter.Pull2(workerpool.MapSeq(context.Background(), p, upTo(50), func(ctx context.Context, i int) (int, error) {
			running.Add(1)
			defer running.Add(-1)
			if i >= 2 {
				<-ctx.Done()
				time.Sleep(time.Second) // stop still waits
			}
			return i, nil
		}))
		for want := range 2 {
			v, err, ok := next()
			require.True(t, ok)
			assert.Equal(t, pair[int]{want, nil}, pair[int]{v, err})
		}
		synctest.Wait() // items 2 and 3 run
		require.Equal(t, int64(2), running.Load())
		stop()
		assert.Zero(t, running.Load(), "stop returned while an fn ran")
		_, _, ok := next()
		assert.False(t, ok)
	})
}

// A sub-pool stopped by another goroutine while the loop waits for a
// running item: the running one yields its result, the rest ErrStopped,
// and the pool's other work goes on.
func TestMapSeqOnASubpoolStoppedByAnotherGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.Stop()
		sub := p.Subpool("batch", 1)
		go func() {
			time.Sleep(1500 * time.Millisecond) // while item 1 runs
			sub.Stop()
		}()
		got := collect(workerpool.MapSeq(context.Background(), sub, upTo(6), func(_ context.Context, i int) (int, error) {
			time.Sleep(time.Second)
			return i, nil
		}))
		require.Len(t, got, 6)
		assert.Equal(t, []pair[int]{{0, nil}, {1, nil}}, got[:2])
		for i, g := range got[2:] {
			assert.Zero(t, g.val, "item %d", i+2)
			assert.ErrorIs(t, g.err, workerpool.ErrStopped, "item %d", i+2)
		}
		assert.NoError(t, p.SubmitWait(func() {}), "the pool goes on")
	})
}

// Many loops at once on one pool with a bounded queue, on the real clock:
// some break at a random pair, some have their ctx cancelled at a random
// instant, one does both, a sub-pool or the pool may stop under them. Every pair is one
// the promises allow, a loop that is not broken sees every pair, no fn runs
// after its loop, and the pool's counts balance at the end.
func TestMapSeqHoldsItsPromisesUnderConcurrentBreaksCancelsAndStops(t *testing.T) {
	errOdd := errors.New("odd item")
	for round := range rounds(48) {
		o := []workerpool.Overflow{workerpool.Block, workerpool.Reject, workerpool.CallerRuns}[round%3]
		p := workerpool.New(3, workerpool.WithMaxWaiting(4), workerpool.WithOverflow(o), workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
		sub := p.Subpool("sub", 2)
		var stopped, subStopped atomic.Bool
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				var s workerpool.Submitter = p
				if g%2 == 1 {
					s = sub
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if g%3 == 0 || g == 5 {
					time.AfterFunc(time.Duration(rand.IntN(300))*time.Microsecond, cancel)
				}
				breakAt := -1
				if g%3 == 1 || g == 5 {
					breakAt = rand.IntN(40)
				}
				var running atomic.Int64
				var over atomic.Bool
				n := 40
				k := 0
				for v, err := range workerpool.MapSeq(ctx, s, upTo(n), func(_ context.Context, i int) (int, error) {
					running.Add(1)
					defer running.Add(-1)
					if over.Load() {
						t.Errorf("round %d loop %d: item %d ran after its loop", round, g, i)
					}
					switch {
					case i%7 == 3:
						panic(i)
					case i%11 == 5:
						return 0, errOdd
					case i%13 == 8:
						runtime.Goexit()
					}
					for range i % 4 {
						runtime.Gosched()
					}
					return i, nil
				}) {
					var pe *workerpool.PanicError
					switch {
					case err == nil && k%13 == 8:
						assert.Zero(t, v, "item %d called Goexit", k)
					case err == nil:
						assert.Equal(t, k, v)
					case errors.As(err, &pe):
						assert.Equal(t, 3, k%7, "item %d", k)
						assert.Equal(t, k, pe.Value)
					case err == errOdd:
						assert.Equal(t, 5, k%11, "item %d", k)
					case err == context.Canceled:
						assert.Error(t, ctx.Err(), "item %d: Canceled while ctx is not done", k)
					case errors.Is(err, workerpool.ErrStopped):
						assert.True(t, stopped.Load() || s == sub && subStopped.Load(), "item %d: ErrStopped with no stop", k)
					default:
						t.Errorf("item %d: unexpected pair (%v, %v)", k, v, err)
					}
					k++
					if k == breakAt {
						break
					}
				}
				over.Store(true)
				assert.Zero(t, running.Load(), "round %d loop %d returned while an fn ran", round, g)
				if breakAt < 0 {
					assert.Equal(t, n, k, "round %d loop %d: one pair per item", round, g)
				}
			})
		}
		switch round % 4 {
		case 1:
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			subStopped.Store(true)
			sub.Stop()
		case 2:
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			stopped.Store(true)
			p.Stop()
		}
		wg.Wait()
		p.StopWait()
		assertBalanced(t, p.Status())
	}
}

// On a full bounded queue, the loop waits for room to submit its next
// item; an item that has ended meanwhile is yielded first, not once
// another task frees room.
func TestMapSeqYieldsAnEndedItemBeforeWaitingForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithMaxWaiting(1))
		defer p.Stop()
		release := hold(t, p, 1) // one worker is busy for the whole test
		defer release()
		start := time.Now()
		for i, err := range workerpool.MapSeq(context.Background(), p, upTo(6), func(_ context.Context, i int) (int, error) {
			time.Sleep(time.Second)
			return i, nil
		}, workerpool.WithWindow(4)) {
			require.NoError(t, err)
			// Item i runs from i to i+1 seconds on the one free worker.
			assert.Equal(t, time.Duration(i+1)*time.Second, time.Since(start), "pair %d", i)
		}
	})
}
