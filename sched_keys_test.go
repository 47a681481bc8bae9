package workerpool_test

import (
	"context"
	"fmt"
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

// Black-box tests of keys (SubmitKey): tasks with the same key never
// overlap and start in the order they were accepted; a busy key holds back
// only its own tasks; the others keep acceptance order.

// keyChecker records, per key, the tasks that run and whether two of them
// ever overlapped.
type keyChecker struct {
	mu       sync.Mutex
	running  map[string]bool
	order    map[string][]int
	overlaps int
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

func newKeyChecker() *keyChecker {
	return &keyChecker{running: map[string]bool{}, order: map[string][]int{}}
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

// TestAKeysNextTaskStartsBeforeLaterTasksWhenItsKeyWasNotBusy: one worker,
// busy. k1 and k2 (one key), then u1, u2 (unkeyed) are accepted in that
// order. k1 has not even started when u1 and u2 are accepted: no task of
// key k runs. The doc: tasks are handed to workers in acceptance order,
// except a task whose key is busy (a task with the same key is running).
// So the worker, coming free after k1, should get k2 before u1 and u2.
func TestAKeysNextTaskStartsBeforeLaterTasksWhenItsKeyWasNotBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		synctest.Wait()
		var l starts
		atkNoErr(t, p.SubmitKey("k", l.task("k1")))
		atkNoErr(t, p.SubmitKey("k", l.task("k2")))
		atkNoErr(t, p.Submit(l.task("u1")))
		atkNoErr(t, p.Submit(l.task("u2")))
		synctest.Wait()
		release()
		p.StopWait()
		want := []string{"k1", "k2", "u1", "u2"}
		if got := l.got(); !slices.Equal(got, want) {
			t.Errorf("start order with one worker: got %v, want %v (acceptance order; no key was busy when k2 could go)", got, want)
		}
	})
}

// TestAFreedKeysNextTaskStartsBeforeTasksAcceptedAfterIt: one worker runs
// k1; k2 (same key) waits for it, then 100 unkeyed tasks are accepted. When
// k1 ends, k2 is the earliest accepted task of the queue and its key is
// free; the doc says only a busy key holds a task back. None of the
// later-accepted tasks may start before it.
func TestAFreedKeysNextTaskStartsBeforeTasksAcceptedAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		gate := make(chan struct{})
		var l starts
		atkNoErr(t, p.SubmitKey("k", func() { l.task("k1")(); <-gate }))
		synctest.Wait()
		atkNoErr(t, p.SubmitKey("k", l.task("k2")))
		for i := range 100 {
			atkNoErr(t, p.Submit(l.task(fmt.Sprint("u", i))))
		}
		synctest.Wait()
		close(gate)
		p.StopWait()
		got := l.got()
		i := slices.Index(got, "k2")
		if i != 1 {
			t.Errorf("k2 (accepted before every u, key free once k1 ended) started at position %d, after %d later-accepted tasks: %v...", i, i-1, got[:min(len(got), 6)])
		}
	})
}

// TestKeyFreedByAPauseTakesItsPlace: k1 waits in the hand-off buffer
// behind a running task; a Pause takes it back (its key is free again);
// u1, k2, u2 come while paused. After the pause, acceptance order holds:
// k1, u1, k2, u2.
func TestKeyFreedByAPauseTakesItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		synctest.Wait()
		var l starts
		atkNoErr(t, p.SubmitKey("k", l.task("k1")))
		atkNoErr(t, p.Submit(l.task("u0")))
		ctx, resume := context.WithCancel(context.Background())
		paused := make(chan struct{})
		go func() { p.Pause(ctx); close(paused) }()
		synctest.Wait()
		atkNoErr(t, p.Submit(l.task("u1")))
		atkNoErr(t, p.SubmitKey("k", l.task("k2")))
		atkNoErr(t, p.Submit(l.task("u2")))
		release()
		<-paused
		synctest.Wait()
		if got := l.got(); len(got) != 0 {
			t.Errorf("tasks started during the pause: %v", got)
		}
		resume()
		p.StopWait()
		want := []string{"k1", "u0", "u1", "k2", "u2"}
		if got := l.got(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

// TestAFreedKeysNextTaskGoesFirstThoughAWorkerIsInItsPanicHandler has two
// workers: one runs k1, the other a task that panics into a handler that
// takes a second; k2 (k1's key), u1 and u2 wait, in that order. When k1
// ends, its key and its worker are free, and k2 must start first: the
// other worker is still in its handler and takes nothing. The worker in
// its handler counted as free, so u1 was handed to it and started, when
// it came out, before k2.
func TestAFreedKeysNextTaskGoesFirstThoughAWorkerIsInItsPanicHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithIdleTimeout(-1),
			workerpool.WithPanicHandler(func(*workerpool.PanicError) { time.Sleep(time.Second) }))
		endK1, panicNow := make(chan struct{}), make(chan struct{})
		require.NoError(t, p.SubmitKey("k", func() { <-endK1 }))
		require.NoError(t, p.Submit(func() { <-panicNow; panic("into the slow handler") }))
		synctest.Wait()
		var l starts
		require.NoError(t, p.SubmitKey("k", l.task("k2")))
		require.NoError(t, p.Submit(l.task("u1")))
		require.NoError(t, p.Submit(l.task("u2")))
		synctest.Wait()
		close(panicNow) // its worker is in the handler for a second
		synctest.Wait()
		close(endK1) // k is free, and so is k1's worker: k2 goes next
		p.StopWait()
		assert.Equal(t, []string{"k2", "u1", "u2"}, l.got(), "k2 first: it was accepted first, and its key is free")
	})
}

// TestAStopCutsEachKeyAndTheUnkeyedTasksBetweenAPrefixAndTheRest stops a
// sub-pool (with its Stop) or the pool (with a Shutdown whose ctx is done)
// while k1 and u3 run on the two workers, and k2 (k1's key) and u4 wait,
// accepted in the order of their numbers. Of each key's tasks, and of the
// unkeyed ones, those that started are the earliest accepted, and the stop
// returns the rest in acceptance order; as Subpool.Stop and Pool.Shutdown
// say, k2, which the busy key held back, is dropped though u3, accepted
// after it, started. (Their docs used to promise that the tasks that
// started were the earliest the queue accepted, which a busy key breaks.)
func TestAStopCutsEachKeyAndTheUnkeyedTasksBetweenAPrefixAndTheRest(t *testing.T) {
	for _, how := range []string{"Subpool.Stop", "Pool.Shutdown"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2)
				s := p.Subpool("s", 2)
				var l starts
				gate := make(chan struct{})
				require.NoError(t, s.SubmitKey("k", func() { l.task("k1")(); <-gate }))
				require.NoError(t, s.SubmitKey("k", l.task("k2"))) // held back by its busy key
				require.NoError(t, s.Submit(func() { l.task("u3")(); <-gate }))
				require.NoError(t, s.Submit(l.task("u4"))) // waits for a worker
				synctest.Wait()
				require.ElementsMatch(t, []string{"k1", "u3"}, l.got())

				var dropped []func()
				stopped := make(chan struct{})
				go func() {
					defer close(stopped)
					if how == "Subpool.Stop" {
						dropped = s.Stop()
					} else {
						dropped, _ = p.Shutdown(cancelled())
					}
				}()
				synctest.Wait()
				close(gate)
				<-stopped
				assert.ElementsMatch(t, []string{"k1", "u3"}, l.got(), "what started")
				for _, f := range dropped {
					f()
				}
				assert.Equal(t, []string{"k2", "u4"}, l.got()[2:], "the rest, in acceptance order")
				p.StopWait()
			})
		})
	}
}
