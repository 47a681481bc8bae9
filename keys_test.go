package workerpool_test

import (
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

// keyChecker records, per key, the tasks that run and whether two of them
// ever overlapped.
type keyChecker struct {
	mu       sync.Mutex
	running  map[string]bool
	order    map[string][]int
	overlaps int
}

func newKeyChecker() *keyChecker {
	return &keyChecker{running: map[string]bool{}, order: map[string][]int{}}
}

func (c *keyChecker) task(key string, i int, d time.Duration) func() {
	return func() {
		c.mu.Lock()
		if c.running[key] {
			c.overlaps++
		}
		c.running[key] = true
		c.order[key] = append(c.order[key], i)
		c.mu.Unlock()
		time.Sleep(d)
		c.mu.Lock()
		c.running[key] = false
		c.mu.Unlock()
	}
}

func TestTasksWithTheSameKeyNeverOverlapAndStartInSubmissionOrder(t *testing.T) {
	for _, on := range []string{"pool", "subpool"} {
		t.Run(on, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(8)
				var to workerpool.Submitter = p
				if on == "subpool" {
					to = p.Subpool("s", 6)
				}
				c := newKeyChecker()
				for i := range 40 {
					for _, key := range []string{"a", "b", "c"} {
						require.NoError(t, to.SubmitKey(key, c.task(key, i, time.Duration(i%3)*time.Millisecond)))
					}
				}
				p.StopWait()
				assert.Zero(t, c.overlaps, "two tasks with one key ran at once")
				for _, key := range []string{"a", "b", "c"} {
					want := make([]int, 40)
					for i := range want {
						want[i] = i
					}
					assert.Equal(t, want, c.order[key], "key %s in submission order", key)
				}
			})
		})
	}
}

func TestABusyKeyHoldsUpNoOtherTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		block := make(chan struct{})
		require.NoError(t, p.SubmitKey("slow", func() { <-block }))
		var ran atomic.Int64
		for range 5 {
			require.NoError(t, p.SubmitKey("slow", func() { ran.Add(100) }))
		}
		for i := range 10 {
			require.NoError(t, p.SubmitKey(fmt.Sprint("k", i), func() { ran.Add(1) }))
			require.NoError(t, p.Submit(func() { ran.Add(1) }))
		}
		synctest.Wait()
		assert.Equal(t, int64(20), ran.Load(), "every other task ran on the second worker")
		s := p.Status()
		assert.Equal(t, 5, s.Waiting, "the busy key's tasks wait")
		assert.Equal(t, 1, s.Busy)
		close(block)
		p.StopWait()
		assert.Equal(t, int64(520), ran.Load())
	})
}

func TestTheSameKeyOnAnotherQueueIsAnotherKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(3)
		a, b := p.Subpool("a", 1), p.Subpool("b", 1)
		block := make(chan struct{})
		var running atomic.Int64
		for _, to := range []workerpool.Submitter{p, a, b} {
			require.NoError(t, to.SubmitKey("k", func() { running.Add(1); <-block }))
		}
		synctest.Wait()
		assert.Equal(t, int64(3), running.Load(), "key k of the pool, of a and of b run at once")
		close(block)
		p.StopWait()
	})
}

// TestAnIdleKeyCostsNothing queues tasks with a hundred thousand distinct
// keys on a paused pool, runs them, and checks that the heap goes back to
// where it started: no key keeps memory once its tasks are done.
func TestAnIdleKeyCostsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 100_000
		if testing.Short() || raceEnabled {
			n = 10_000
		}
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint("key-", i)
		}
		task := func() {}
		p, resume := pausedPool(t)
		defer p.Stop()
		before := liveHeap()
		for _, k := range keys {
			require.NoError(t, p.SubmitKey(k, task))
		}
		synctest.Wait()
		held := liveHeap()
		drain(t, p, resume)
		after := liveHeap()
		runtime.KeepAlive(keys) // live throughout: not part of the difference
		t.Logf("heap: %d B before, %d B with %d keys waiting, %d B after", before, held, n, after)
		assert.Greater(t, held, before+uint64(n)*16, "waiting keys take memory")
		assert.Less(t, after, before+128<<10, "idle keys take none, but for a fixed cache of unused key lines")
	})
}

// TestAKeyHoldsBackOnlyTheTasksOfABusyKey is the review's case: on a paused
// one-worker pool (and on a sub-pool), K1(a) K2(b) U1 K3(c) U2, where no
// key is ever busy when another task of it waits, start in acceptance
// order. Then a busy key holds back its own later task, and nothing else.
func TestAKeyHoldsBackOnlyTheTasksOfABusyKey(t *testing.T) {
	for _, onSub := range []bool{false, true} {
		name := map[bool]string{false: "pool", true: "subpool"}[onSub]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, resume := pausedPool(t)
				defer p.Stop()
				var s workerpool.Submitter = p
				if onSub {
					s = p.Subpool("s", 2)
				}
				var got []string
				rec := func(name string) func() { return func() { got = append(got, name) } }
				require.NoError(t, s.SubmitKey("a", rec("K1")))
				require.NoError(t, s.SubmitKey("b", rec("K2")))
				require.NoError(t, s.Submit(rec("U1")))
				require.NoError(t, s.SubmitKey("c", rec("K3")))
				require.NoError(t, s.Submit(rec("U2")))
				resume()
				synctest.Wait()
				assert.Equal(t, []string{"K1", "K2", "U1", "K3", "U2"}, got)

				// Two workers now: A1 holds key a while A2 waits for it; the
				// tasks accepted after A2 do not wait for A2.
				got = nil
				p.Resize(2)
				block := make(chan struct{})
				require.NoError(t, s.SubmitKey("a", func() { <-block; got = append(got, "A1") }))
				synctest.Wait()
				require.NoError(t, s.SubmitKey("a", rec("A2")))
				require.NoError(t, s.Submit(rec("U3")))
				require.NoError(t, s.SubmitKey("b", rec("B1")))
				synctest.Wait()
				assert.Equal(t, []string{"U3", "B1"}, got, "only A2 waits for A1")
				close(block)
				synctest.Wait()
				assert.Equal(t, []string{"U3", "B1", "A1", "A2"}, got)
			})
		})
	}
}
