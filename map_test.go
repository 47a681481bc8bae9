package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

func TestMapReturnsEveryResultInInputOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.Stop()
		items := make([]int, 100)
		for i := range items {
			items[i] = i
		}
		// Later items finish first, so completion order is not input order.
		got, err := workerpool.Map(context.Background(), p, items, func(_ context.Context, n int) (string, error) {
			time.Sleep(time.Duration(len(items)-n) * time.Millisecond)
			return fmt.Sprint(n * n), nil
		})
		require.NoError(t, err)
		require.Len(t, got, len(items))
		for i, s := range got {
			assert.Equal(t, fmt.Sprint(i*i), s)
		}
	})
}

func TestMapOfAnEmptySliceReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A paused pool would hold any item: Map must not submit one.
		p := workerpool.New(1)
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		got, err := workerpool.Map(context.Background(), p, []int{}, func(context.Context, int) (int, error) {
			t.Error("fn called on no items")
			return 0, nil
		})
		assert.NoError(t, err)
		assert.Empty(t, got)
		got, err = workerpool.Map[int, int](context.Background(), p, nil, func(context.Context, int) (int, error) { return 0, nil })
		assert.NoError(t, err)
		assert.NotNil(t, got)
		assert.Zero(t, p.Status().Submitted)
		resume()
		p.StopWait()
	})
}

func TestMapStopsHandingOutItemsAfterTheFirstError(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(workers)
				defer p.Stop()
				items := make([]int, 1000)
				for i := range items {
					items[i] = i
				}
				var calls, late atomic.Int64
				var failedAt atomic.Pointer[time.Time]
				errBad := errors.New("bad item")
				got, err := workerpool.Map(context.Background(), p, items, func(ctx context.Context, n int) (int, error) {
					calls.Add(1)
					if at := failedAt.Load(); at != nil && time.Now().After(*at) {
						late.Add(1) // started after the failure (on the bubble's clock)
					}
					if n == 10 {
						// Fails at once, while its neighbours still run.
						now := time.Now()
						failedAt.Store(&now)
						return 0, errBad
					}
					time.Sleep(time.Millisecond)
					return n, nil
				})
				assert.ErrorIs(t, err, errBad)
				assert.Nil(t, got, "no partial results")
				// The items before 10 ran, but for any handed out at the
				// same instant as 10 and not yet started when it failed;
				// those started beside it finish; none starts after.
				assert.GreaterOrEqual(t, calls.Load(), int64(11-(workers-1)))
				assert.LessOrEqual(t, calls.Load(), int64(10+workers))
				assert.Zero(t, late.Load())
				// Map fed the pool: it never had more than two items per
				// worker outstanding, so most of the 1000 were never
				// submitted at all.
				assert.LessOrEqual(t, p.Status().Submitted, uint64(calls.Load())+2*uint64(workers))
			})
		})
	}
}

func TestMapReportsAPanicAsPanicError(t *testing.T) {
	p := workerpool.New(2)
	defer p.Stop()
	_, err := workerpool.Map(context.Background(), p, []string{"a", "", "c"}, func(_ context.Context, s string) (byte, error) {
		return s[0], nil // panics on ""
	})
	var pe *workerpool.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Error(), "index out of range")
}

func TestMapReturnsTheContextsCauseWhenItIsDone(t *testing.T) {
	// The deadline falls at every point of the run, including the instants
	// when no item is queued and the next is not yet handed out.
	for timeout := range 50 { // the 100 items take 50ms on 2 workers
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(2)
			defer p.Stop()
			ctx, cancel := context.WithTimeoutCause(context.Background(), time.Duration(timeout)*time.Millisecond, io.ErrNoProgress)
			defer cancel()
			var calls atomic.Int64
			got, err := workerpool.Map(ctx, p, make([]int, 100), func(ctx context.Context, _ int) (int, error) {
				calls.Add(1)
				time.Sleep(time.Millisecond)
				return 0, nil // ignores ctx: Map stops anyway
			})
			if calls.Load() == 100 {
				// The deadline came as the last items started: all ran.
				require.GreaterOrEqual(t, timeout, 49)
				return
			}
			// Some item never ran: Map must not report success.
			assert.ErrorIs(t, err, io.ErrNoProgress, "timeout %dms", timeout)
			assert.Nil(t, got)
		})
	}
}

func TestMapNeverDeadlocksOnABoundedQueue(t *testing.T) {
	for _, o := range []workerpool.Overflow{workerpool.Block, workerpool.Reject, workerpool.CallerRuns} {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The window (2 per worker) is larger than the queue.
				p := workerpool.New(2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(o))
				defer p.Stop()
				items := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
				got, err := workerpool.Map(context.Background(), p, items, func(_ context.Context, s string) (string, error) {
					time.Sleep(time.Millisecond)
					return strings.ToUpper(s), nil
				})
				require.NoError(t, err, "Map waits for room whatever the policy")
				assert.Equal(t, []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"}, got)
				assert.Zero(t, p.Status().Rejected)
			})
		})
	}
}

func TestMapReturnsErrStoppedWhenThePoolStops(t *testing.T) {
	t.Run("under it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(1)
			release := make(chan struct{})
			var calls atomic.Int64
			done := make(chan error)
			go func() {
				_, err := workerpool.Map(context.Background(), p, make([]int, 50), func(context.Context, int) (int, error) {
					calls.Add(1)
					<-release
					return 0, nil
				})
				done <- err
			}()
			synctest.Wait() // item 0 runs, item 1 waits in the queue
			stopped := make(chan struct{})
			go func() { p.Stop(); close(stopped) }()
			synctest.Wait()
			close(release) // the running item finishes
			assert.ErrorIs(t, <-done, workerpool.ErrStopped)
			<-stopped
			assert.Equal(t, int64(1), calls.Load())
		})
	})
	t.Run("before it", func(t *testing.T) {
		p := workerpool.New(1)
		p.Stop()
		_, err := workerpool.Map(context.Background(), p, []int{1, 2, 3}, func(context.Context, int) (int, error) {
			t.Error("ran on a stopped pool")
			return 0, nil
		})
		assert.ErrorIs(t, err, workerpool.ErrStopped)
	})
}

func TestMapWithANilFuncReturnsErrNilTask(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	_, err := workerpool.Map[int, int](context.Background(), p, []int{1}, nil)
	assert.ErrorIs(t, err, workerpool.ErrNilTask)
}

func TestMapAllocatesNothingPerItem(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	fn := func(_ context.Context, n int) (int, error) { return n, nil }
	ctx := context.Background()
	allocs := func(n int) float64 {
		items := make([]int, n)
		return testing.AllocsPerRun(50, func() { _, _ = workerpool.Map(ctx, p, items, fn) })
	}
	few, many := allocs(1), allocs(300)
	assert.Equal(t, few, many, "allocations per call do not grow with the items")
	assert.LessOrEqual(t, many, 9.0)
	t.Logf("Map allocates %v objects per call", many)
}

func ExampleMap() {
	p := workerpool.New(4)
	defer p.StopWait()

	words := []string{"pool", "worker", "task", "queue"}
	lengths, err := workerpool.Map(context.Background(), p, words, func(_ context.Context, w string) (int, error) {
		return len(w), nil
	})
	fmt.Println(lengths, err) // in the order of words, whatever order they ran in

	_, err = workerpool.Map(context.Background(), p, words, func(_ context.Context, w string) (int, error) {
		if w == "task" {
			return 0, fmt.Errorf("cannot measure %q", w)
		}
		return len(w), nil
	})
	fmt.Println(err)
	// Output:
	// [4 6 4 5] <nil>
	// cannot measure "task"
}

// Map with a nil context or a nil Submitter panics at once, even for an
// empty slice, with a message that names Map (not the Group it uses); the
// pool accepts nothing.
func TestMapWithANilContextOrSubmitterPanicsNamingIt(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	fn := func(_ context.Context, n int) (int, error) { return n, nil }
	for _, tc := range nilArgCases("Map", p) {
		t.Run(tc.name, func(t *testing.T) {
			for _, items := range [][]int{{1, 2}, nil} {
				assert.PanicsWithValue(t, tc.want, func() {
					_, _ = workerpool.Map(tc.ctx, tc.s, items, fn)
				}, "items %v", items)
			}
		})
	}
	assert.Zero(t, p.Status().Submitted)
}
