package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// The tests of rates: at most burst + limit × t starts in any window t,
// for the pool, a sub-pool and each key; a token given back once for each
// hand-off taken back; a paced task waits in its queue, counted, bounded,
// dropped by Stop, run by StopWait; Pause lets tokens gather.

// startLog records when tasks start, by name of what they belong to.
type startLog struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (l *startLog) task(group string, d time.Duration) func() {
	return func() {
		l.mu.Lock()
		if l.at == nil {
			l.at = map[string][]time.Time{}
		}
		l.at[group] = append(l.at[group], time.Now())
		l.mu.Unlock()
		time.Sleep(d)
	}
}

func (l *startLog) get(group string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.at[group])
}

// assertPaced checks that in every window of the starts, from one start to
// a later one, there are at most burst + limit × its length.
func assertPaced(t *testing.T, what string, starts []time.Time, perSecond float64, burst int) {
	t.Helper()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := range starts {
		for j := i; j < len(starts); j++ {
			window := starts[j].Sub(starts[i]).Seconds()
			if n := j - i + 1; float64(n) > float64(burst)+perSecond*window+1e-9 {
				t.Fatalf("%s: %d starts in %.3fs: more than %d + %g a second", what, n, window, burst, perSecond)
			}
		}
	}
}

func TestARateStartsAtMostBurstPlusLimitTimesTInAnyWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		p.SetRate(20, 4) // the pool: all its tasks
		a := p.Subpool("a", 8)
		a.SetRate(workerpool.Every(100*time.Millisecond), 2)
		b := p.Subpool("b", 8)
		b.SetKeyRate(workerpool.Every(250*time.Millisecond), 1)
		var log startLog
		for i := range 40 {
			require.NoError(t, p.Submit(log.task("pool", time.Duration(i%3)*time.Millisecond)))
			require.NoError(t, a.Submit(log.task("a", 7*time.Millisecond)))
			key := fmt.Sprint("k", i%3)
			require.NoError(t, b.SubmitKey(key, log.task(key, time.Millisecond)))
		}
		p.StopWait()
		var all []time.Time
		for _, g := range []string{"pool", "a", "k0", "k1", "k2"} {
			all = append(all, log.get(g)...)
		}
		require.Len(t, all, 120)
		assertPaced(t, "the pool", all, 20, 4)
		assertPaced(t, "sub-pool a", log.get("a"), 10, 2)
		for _, k := range []string{"k0", "k1", "k2"} {
			assertPaced(t, "key "+k, log.get(k), 4, 1)
		}
		// The pool's rate binds: 120 starts at 20 a second, 4 at once.
		last := slices.MaxFunc(all, func(a, b time.Time) int { return a.Compare(b) })
		first := slices.MinFunc(all, func(a, b time.Time) int { return a.Compare(b) })
		assert.GreaterOrEqual(t, last.Sub(first), (120-4)*50*time.Millisecond)
	})
}

func TestARateChangedWhileTasksWaitTakesEffectForTheNextStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		p.SetRate(workerpool.Every(time.Second), 1)
		var log startLog
		for range 10 {
			require.NoError(t, p.Submit(log.task("t", 0)))
		}
		time.Sleep(2500 * time.Millisecond) // 3 started: at 0, 1s, 2s
		synctest.Wait()
		require.Len(t, log.get("t"), 3)
		p.SetRate(workerpool.Every(100*time.Millisecond), 1) // the bucket is empty: it keeps its whole tokens
		synctest.Wait()
		require.Len(t, log.get("t"), 3, "no token was whole at the change")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		require.Len(t, log.get("t"), 4)
		p.SetRate(workerpool.Inf, 0) // no rate: the rest start at once
		synctest.Wait()
		require.Len(t, log.get("t"), 10)
		p.StopWait()
	})
}

func TestAPacedTaskCountsAsWaitingAndPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		a := p.Subpool("a", 4)
		a.SetRate(workerpool.Every(time.Second), 1)
		for range 3 {
			require.NoError(t, a.Submit(func() {}))
		}
		synctest.Wait()
		st, sub := p.Status(), a.Status()
		assert.Equal(t, 2, st.Waiting)
		assert.Equal(t, 2, st.Paced, "the pool's Status: tasks a rate holds back")
		assert.Equal(t, 2, sub.Paced, "the sub-pool's")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 1, p.Status().Paced)
		assert.Equal(t, 1, a.Status().Paced)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Zero(t, p.Status().Paced)
		assert.Zero(t, a.Status().Paced, "published back to 0 once none is held")
		p.StopWait()
	})
}

func TestAPacedSubpoolKeepsItsTurnAndOthersGoMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		a := p.Subpool("a", 1)
		a.SetRate(workerpool.Every(time.Second), 1)
		var s starts
		release := hold(t, p, 1)
		require.NoError(t, a.Submit(s.task("a1")))
		require.NoError(t, a.Submit(s.task("a2")))
		for i := range 3 {
			require.NoError(t, p.Submit(s.task(fmt.Sprint("p", i))))
		}
		release()
		synctest.Wait()
		// a1 takes a's token; a2 waits for the next, and the pool's own go.
		assert.Equal(t, []string{"a1", "p0", "p1", "p2"}, s.got())
		require.NoError(t, p.Submit(func() { time.Sleep(2 * time.Second) }))
		for i := 3; i < 6; i++ {
			require.NoError(t, p.Submit(s.task(fmt.Sprint("p", i))))
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		// a2's token came while the sleeper ran: a2 goes first, at its turn.
		assert.Equal(t, []string{"a1", "p0", "p1", "p2", "a2", "p3", "p4", "p5"}, s.got())
		p.StopWait()
	})
}

func TestATokenIsGivenBackOnceForEachHandOffTakenBack(t *testing.T) {
	// An hour a token: none comes back by time in the test, so every start
	// after the burst is a token given back.
	hour := workerpool.Every(time.Hour)
	cases := []struct {
		name string
		// takeBack takes the hand-offs of the two tasks in the outbox
		// back, after the blocking task started, and returns once the
		// pool goes on; it may release the blocking task.
		takeBack func(t *testing.T, p *workerpool.Pool, a *workerpool.Subpool, release func())
		// extra is how many of a's tasks takeBack submits, each of which
		// takes a token and runs.
		extra int
	}{
		{"Pause", func(t *testing.T, p *workerpool.Pool, a *workerpool.Subpool, release func()) {
			ctx, cancel := context.WithCancel(context.Background())
			paused := make(chan struct{})
			go func() { p.Pause(ctx); close(paused) }()
			synctest.Wait()
			release()
			<-paused
			cancel()
		}, 0},
		{"Resize of the sub-pool", func(t *testing.T, p *workerpool.Pool, a *workerpool.Subpool, release func()) {
			a.Resize(3)
		}, 0},
		{"a new queue's turn", func(t *testing.T, p *workerpool.Pool, a *workerpool.Subpool, release func()) {
			require.NoError(t, p.Subpool("b", 1).Submit(func() {}))
		}, 0},
		{"a higher level", func(t *testing.T, p *workerpool.Pool, a *workerpool.Subpool, release func()) {
			require.NoError(t, a.Priority(1).Submit(func() {}))
		}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1)
				a := p.Subpool("a", 2)
				a.SetRate(hour, 4)
				block := make(chan struct{})
				var once sync.Once
				release := func() { once.Do(func() { close(block) }) }
				var ran atomic.Int64
				require.NoError(t, a.Submit(func() { <-block; ran.Add(1) }))
				synctest.Wait()
				for range 2 {
					require.NoError(t, a.Submit(func() { ran.Add(1) })) // to the outbox, a token each
				}
				synctest.Wait()
				require.Zero(t, a.Status().Paced, "3 tokens taken, 1 left")
				c.takeBack(t, p, a, release)
				release()
				for range 3 - c.extra {
					require.NoError(t, a.Submit(func() { ran.Add(1) }))
				}
				synctest.Wait()
				// 4 tokens: the blocking task's, the two given back and
				// taken again, and one more: two are left waiting.
				assert.Equal(t, int64(4-c.extra), ran.Load(), "each token given back once, never twice")
				assert.Equal(t, 2, a.Status().Paced)
				assert.Len(t, p.Stop(), 2)
			})
		})
	}
}

func TestACallThatGivesUpInTheOutboxGivesItsTokenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		p.SetRate(workerpool.Every(time.Hour), 2)
		release := hold(t, p, 1) // a token
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := workerpool.Call(ctx, p, func(context.Context) (int, error) { return 1, nil })
			done <- err
		}()
		synctest.Wait() // the Call's task took the second token, in the outbox
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
		var ran atomic.Bool
		require.NoError(t, p.Submit(func() { ran.Store(true) }))
		release()
		synctest.Wait()
		assert.True(t, ran.Load(), "the Call's token came back")
		require.NoError(t, p.Submit(func() {}))
		synctest.Wait()
		assert.Equal(t, 1, p.Status().Paced, "and only once")
		p.Stop()
	})
}

func TestStopDropsPacedTasksAndStopWaitRunsThem(t *testing.T) {
	t.Run("Stop", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(2)
			p.SetRate(workerpool.Every(time.Hour), 1)
			var ran atomic.Int64
			for range 3 {
				require.NoError(t, p.Submit(func() { ran.Add(1) }))
			}
			synctest.Wait()
			assert.Len(t, p.Stop(), 2)
			assert.Equal(t, int64(1), ran.Load())
			assert.Equal(t, uint64(2), p.Status().Abandoned)
		})
	})
	t.Run("StopWait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(2)
			p.SetRate(workerpool.Every(time.Second), 1)
			var ran atomic.Int64
			for range 3 {
				require.NoError(t, p.Submit(func() { ran.Add(1) }))
			}
			start := time.Now()
			p.StopWait()
			assert.Equal(t, int64(3), ran.Load())
			assert.Equal(t, 2*time.Second, time.Since(start), "it waited for the rate")
		})
	})
	t.Run("Shutdown", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(2)
			p.SetRate(workerpool.Every(time.Second), 1)
			var ran atomic.Int64
			for range 4 {
				require.NoError(t, p.Submit(func() { ran.Add(1) }))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			dropped, err := p.Shutdown(ctx)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Len(t, dropped, 2)
			assert.Equal(t, int64(2), ran.Load())
		})
	})
}

func TestPauseLetsTokensGatherUpToTheBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		p.SetRate(workerpool.Every(time.Second), 3)
		var log startLog
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Pause(ctx)
		for range 6 {
			require.NoError(t, p.Submit(log.task("t", 0)))
		}
		<-ctx.Done()
		synctest.Wait()
		assert.Len(t, log.get("t"), 3, "ten seconds paused: the burst, no more")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Len(t, log.get("t"), 4)
		p.StopWait()
	})
}

func TestABoundedQueueCountsPacedTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4, workerpool.WithMaxWaiting(2), workerpool.WithOverflow(workerpool.Reject))
		p.SetRate(workerpool.Every(time.Second), 1)
		for range 3 {
			require.NoError(t, p.Submit(func() {}))
		}
		synctest.Wait()
		assert.ErrorIs(t, p.Submit(func() {}), workerpool.ErrQueueFull, "two paced tasks fill the bound")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.NoError(t, p.Submit(func() {}), "one started: room for one")
		p.Stop()
	})
}

func TestAKeyRateHoldsOnlyItsKeyAndKeepsItsBucketBetweenTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		p.SetKeyRate(workerpool.Every(time.Second), 1)
		var s starts
		require.NoError(t, p.SubmitKey("a", s.task("a1")))
		require.NoError(t, p.SubmitKey("a", s.task("a2")))
		require.NoError(t, p.SubmitKey("b", s.task("b1")))
		require.NoError(t, p.Submit(s.task("u1")))
		synctest.Wait()
		assert.ElementsMatch(t, []string{"a1", "b1", "u1"}, s.got(), "a2 waits for a's token, no other task does")
		assert.Equal(t, 1, p.Status().Paced)
		// b's only task ended with its bucket empty: a task of b a moment
		// later still waits for b's token.
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, p.SubmitKey("b", s.task("b2")))
		synctest.Wait()
		assert.Len(t, s.got(), 3, "b's bucket was kept while it filled")
		assert.Equal(t, 2, p.Status().Paced)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		assert.ElementsMatch(t, []string{"a1", "b1", "u1", "a2", "b2"}, s.got())
		p.StopWait()
	})
}

func TestAKeyRateUnderABusyKeyWaitsForBoth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		a := p.Subpool("a", 4)
		a.SetKeyRate(workerpool.Every(time.Second), 2)
		var log startLog
		for range 4 {
			require.NoError(t, a.SubmitKey("k", log.task("k", 1500*time.Millisecond)))
		}
		p.StopWait()
		starts := log.get("k")
		require.Len(t, starts, 4)
		for i := 1; i < 4; i++ {
			assert.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), 1500*time.Millisecond, "one at a time")
		}
		assertPaced(t, "key k", starts, 1, 2)
	})
}

func TestRateConfigurationPanics(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	for _, c := range []struct {
		name  string
		limit workerpool.Limit
		burst int
	}{{"zero limit", 0, 1}, {"negative limit", -1, 1}, {"zero burst", 10, 0}, {"NaN", workerpool.Limit(nan()), 1}} {
		t.Run(c.name, func(t *testing.T) {
			assert.PanicsWithValue(t, fmt.Sprintf("workerpool: SetRate(%v, %d): %s", float64(c.limit), c.burst, map[bool]string{true: "the burst must be at least 1", false: "the limit must be above 0 (Inf for none)"}[c.name == "zero burst"]),
				func() { p.SetRate(c.limit, c.burst) })
		})
	}
	assert.NotPanics(t, func() { p.SetRate(workerpool.Inf, 0) }, "Inf needs no burst")
	assert.Panics(t, func() { p.Subpool("a", 1).SetKeyRate(1, 0) })
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

func TestEveryIsOneStartPerInterval(t *testing.T) {
	assert.Equal(t, workerpool.Limit(2), workerpool.Every(500*time.Millisecond))
	assert.Equal(t, workerpool.Inf, workerpool.Every(0))
	assert.True(t, errors.Is(workerpool.ErrStopped, workerpool.ErrStopped))
}

// A rate paces the tasks of a pool, a sub-pool or each key: here two at
// once, then one every 10 ms. The tasks wait in the queue, not on a
// worker.
func ExamplePool_SetRate() {
	p := workerpool.New(8)
	p.SetRate(workerpool.Every(10*time.Millisecond), 2)

	start := time.Now()
	for range 6 {
		p.Submit(func() {})
	}
	p.StopWait() // waits for the rate to let every task start
	fmt.Println(time.Since(start) >= 40*time.Millisecond)
	// Output: true
}

// Each key has its own rate: two requests a second to each host, one at a
// time, and hosts do not wait for each other.
func ExamplePool_SetKeyRate() {
	p := workerpool.New(8)
	p.SetKeyRate(workerpool.Every(20*time.Millisecond), 1)

	var mu sync.Mutex
	fetched := map[string]int{}
	start := time.Now()
	for _, url := range []string{"a.example/1", "b.example/1", "a.example/2", "b.example/2", "a.example/3"} {
		host, _, _ := strings.Cut(url, "/")
		p.SubmitKey(host, func() {
			mu.Lock()
			fetched[host]++
			mu.Unlock()
		})
	}
	p.StopWait()
	fmt.Println(fetched["a.example"], fetched["b.example"], time.Since(start) >= 40*time.Millisecond)
	// Output: 3 2 true
}

func TestARateSetWhileTheBufferHoldsTasksPacesThemToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		var log startLog
		for range 10 {
			require.NoError(t, p.Submit(log.task("t", 0))) // into the hand-off buffer
		}
		synctest.Wait()
		p.SetRate(workerpool.Every(time.Second), 2)
		release()
		synctest.Wait()
		assert.Len(t, log.get("t"), 2, "the burst, and no more: the buffer's tasks came back to the queue")
		time.Sleep(7 * time.Second)
		synctest.Wait()
		assert.Len(t, log.get("t"), 9)
		assertPaced(t, "the pool", log.get("t"), 1, 2)
		p.StopWait()
	})
}
