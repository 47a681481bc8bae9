package workerpool_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests of priority levels: strict order across levels within a
// queue, first in first out within a level; turns between queues as
// without levels; a high task behind a full hand-off buffer of lower ones
// waits for none of them; keys keep their order across levels.

func TestWithinAQueueAHigherLevelStartsFirstAndALevelIsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		var s starts
		var want [3][]string
		for i := range 30 {
			level := (i * 7) % 3 // the levels interleaved
			name := fmt.Sprint("L", level, "-", i)
			require.NoError(t, p.Priority(level).Submit(s.task(name)))
			want[level] = append(want[level], name)
		}
		synctest.Wait() // the loop has taken each one in
		release()
		p.StopWait()
		assert.Equal(t, slices.Concat(want[2], want[1], want[0]), s.got())
	})
}

func TestLevelsDoNotChangeTheTurnsBetweenQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		a, b := p.Subpool("a", 1), p.Subpool("b", 1)
		release := hold(t, p, 1)
		var s starts
		for i := range 4 {
			require.NoError(t, a.Priority(9).Submit(s.task(fmt.Sprint("a", i))))
			require.NoError(t, b.Submit(s.task(fmt.Sprint("b", i))))
		}
		release()
		p.StopWait()
		assert.Equal(t, []string{"a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3"}, s.got(),
			"a's urgent flood takes a's turns only")
	})
}

func TestAHighTaskBehindAFullOutboxOfLowerOnesWaitsForNoneOfThem(t *testing.T) {
	for _, c := range []struct {
		workers int
		settle  bool
	}{{1, true}, {2, true}, {4, true}, {1, false}, {2, false}, {4, false}} {
		workers, settle := c.workers, c.settle
		t.Run(fmt.Sprint(workers, " workers, settled ", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(workers)
				release := hold(t, p, workers)
				// Each task takes a millisecond, so that in the bubble the
				// time a task starts says when it was handed out: a worker
				// handed a task may wait for a processor while the others
				// run many, but the clock waits for it.
				var log startLog
				for range 200 { // more than the outbox holds
					require.NoError(t, p.Submit(log.task("low", time.Millisecond)))
				}
				require.NoError(t, p.Priority(1).Submit(log.task("high", time.Millisecond)))
				if settle {
					synctest.Wait() // the loop has taken the buffer back
				}
				release()
				p.StopWait()
				high := log.get("high")[0]
				before := 0
				for _, at := range log.get("low") {
					if at.Before(high) {
						before++
					}
				}
				if settle {
					assert.Zero(t, before, "the buffer's low tasks were taken back")
				} else {
					// The workers took tasks from the buffer while the loop
					// received the high one: the documented bound, the
					// buffer's depth (64) and two.
					assert.LessOrEqual(t, before, 64+2, "behind at most the tasks the workers took meanwhile")
				}
			})
		})
	}
}

func TestAHighTaskOfABusyKeyWaitsForItsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		block := make(chan struct{})
		var s starts
		require.NoError(t, p.SubmitKey("k", func() { <-block }))
		require.NoError(t, p.SubmitKey("k", s.task("k-low")))
		require.NoError(t, p.Priority(5).SubmitKey("k", s.task("k-high")))
		require.NoError(t, p.Submit(s.task("other")))
		synctest.Wait()
		assert.Equal(t, []string{"other"}, s.got(), "the key's tasks wait for its running one, whatever their level")
		close(block)
		p.StopWait()
		assert.Equal(t, []string{"other", "k-low", "k-high"}, s.got(), "a key's tasks keep acceptance order: the documented inversion")
	})
}

func TestLevelsWorkWithEverySubmitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		a := p.Subpool("a", 2)
		for _, v := range []*workerpool.Level{p.Priority(3), a.Priority(3)} {
			f := workerpool.Go(v, func() (int, error) { return 1, nil })
			got, err := f.Wait()
			require.NoError(t, err)
			assert.Equal(t, 1, got)
			n, err := workerpool.Call(context.Background(), v, func(context.Context) (int, error) { return 2, nil })
			require.NoError(t, err)
			assert.Equal(t, 2, n)
			out, err := workerpool.Map(context.Background(), v, []int{1, 2, 3}, func(_ context.Context, x int) (int, error) { return 2 * x, nil })
			require.NoError(t, err)
			assert.Equal(t, []int{2, 4, 6}, out)
			var seq []int
			for r, err := range workerpool.MapSeq(context.Background(), v, []int{1, 2}, func(_ context.Context, x int) (int, error) { return x, nil }) {
				require.NoError(t, err)
				seq = append(seq, r)
			}
			assert.Equal(t, []int{1, 2}, seq)
			g := v.Group(context.Background())
			g.Go(func(context.Context) error { return nil })
			require.NoError(t, g.Wait())
			require.NoError(t, v.SubmitWait(func() {}))
			require.NoError(t, v.TrySubmit(func() {}))
			require.NoError(t, v.SubmitContext(context.Background(), func() {}))
			require.NoError(t, v.SubmitKey("k", func() {}))
		}
		p.StopWait()
	})
}

func TestStopReturnsTasksOfEveryLevelInAcceptanceOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		var s starts
		var names []string
		for i := range 6 {
			name := fmt.Sprint(i)
			names = append(names, name)
			require.NoError(t, p.Priority(i%3).Submit(s.task(name)))
		}
		stopped := make(chan []func())
		go func() { stopped <- p.Stop() }()
		synctest.Wait() // the queue is dropped; Stop waits for the held task
		release()
		dropped := <-stopped
		for _, fn := range dropped {
			fn()
		}
		assert.Equal(t, names, s.got(), "every level's, in the order accepted")
	})
}

func TestLevelsHoldUnderPauseAndResize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		ctx, cancel := context.WithCancel(context.Background())
		p.Pause(ctx)
		var s starts
		var starts startLog
		task := func(name string) func() {
			return func() {
				s.task(name)()
				starts.task(strings.TrimRight(name, "0123456789"), time.Millisecond)()
			}
		}
		for i := range 5 {
			require.NoError(t, p.Submit(task(fmt.Sprint("low", i))))
			require.NoError(t, p.Priority(1).Submit(task(fmt.Sprint("high", i))))
		}
		p.Resize(2)
		release := hold(t, p, 0)
		cancel()
		synctest.Wait()
		p.Resize(1)
		p.StopWait()
		release()
		require.Len(t, s.got(), 10)
		// Two workers start tasks handed out together in either order, and
		// a task that takes a millisecond keeps the clock: every high task
		// started no later than any low one.
		lastHigh := slices.MaxFunc(starts.get("high"), time.Time.Compare)
		firstLow := slices.MinFunc(starts.get("low"), time.Time.Compare)
		assert.False(t, firstLow.Before(lastHigh), "high tasks by %v, low ones from %v", lastHigh, firstLow)
	})
}

func TestABoundedQueueCountsEveryLevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(2), workerpool.WithOverflow(workerpool.Reject))
		release := hold(t, p, 1)
		synctest.Wait()
		require.NoError(t, p.Submit(func() {}))
		require.NoError(t, p.Priority(1).Submit(func() {}))
		assert.ErrorIs(t, p.Priority(2).Submit(func() {}), workerpool.ErrQueueFull)
		release()
		p.StopWait()
	})
}

func TestPriorityPanicsOnANegativeLevel(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.PanicsWithValue(t, "workerpool: Priority(-1): the level must be 0 to MaxLevel", func() { p.Priority(-1) })
	assert.Panics(t, func() { p.Subpool("a", 1).Priority(-2) })
	var v *workerpool.Level
	assert.PanicsWithValue(t, "workerpool: Map: nil Submitter", func() {
		_, _ = workerpool.Map(context.Background(), v, []int{1}, func(context.Context, int) (int, error) { return 0, nil })
	})
	_ = time.Second
}

// Within a queue, a higher level goes first: retries jump the queue of
// first tries.
func ExamplePool_Priority() {
	p := workerpool.New(1) // one worker, so the start order is plain
	retries := p.Priority(1)

	var mu sync.Mutex
	var order []string
	record := func(name string) func() {
		return func() {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
	}
	ctx, resume := context.WithCancel(context.Background())
	p.Pause(ctx) // hold the worker while the queue fills
	p.Submit(record("first1"))
	p.Submit(record("first2"))
	retries.Submit(record("retry1"))
	p.Submit(record("first3"))
	retries.Submit(record("retry2"))
	resume()

	p.StopWait()
	fmt.Println(strings.Join(order, " "))
	// Output: retry1 retry2 first1 first2 first3
}

func TestWithTimingsStatusSumsUpWaitsByLevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithTaskTimings())
		assert.Nil(t, p.Status().LevelWait, "no level made: no sums by level")
		a := p.Subpool("a", 1)
		high := a.Priority(2)
		release := hold(t, p, 1)
		time.Sleep(time.Second)
		require.NoError(t, a.Submit(func() {}))
		require.NoError(t, high.Submit(func() {}))
		time.Sleep(time.Second)
		release()
		p.StopWait()
		waits := p.Status().LevelWait
		require.Contains(t, waits, 0)
		require.Contains(t, waits, 2)
		assert.Equal(t, uint64(2), waits[0].Count, "the holding task and a's")
		assert.Equal(t, time.Second, waits[0].Max)
		assert.Equal(t, uint64(1), waits[2].Count)
		assert.Equal(t, time.Second, waits[2].Total, "the high task went first, after the hold")
		sub := a.Status().LevelWait
		assert.Equal(t, uint64(1), sub[0].Count)
		assert.Equal(t, uint64(1), sub[2].Count)
	})
}
