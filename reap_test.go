package workerpool_test

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

func TestIdleWorkersExitWithinTwoTimeoutsButNotBelowMinimum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		p := workerpool.New(8, workerpool.WithMinWorkers(2), workerpool.WithIdleTimeout(timeout))
		release := hold(t, p, 8)
		time.Sleep(timeout / 3)
		release()
		synctest.Wait()
		idleAt := time.Now()
		require.Equal(t, 8, p.Status().Idle)

		time.Sleep(timeout - 1)
		assert.Equal(t, 8, p.Status().Workers, "no worker exits before one idle timeout")
		time.Sleep(time.Until(idleAt.Add(2 * timeout)))
		synctest.Wait()
		assert.Equal(t, 2, p.Status().Workers, "idle workers exit within two timeouts, down to MinWorkers")
		time.Sleep(time.Hour)
		assert.Equal(t, 2, p.Status().Workers, "MinWorkers are never reaped")
		p.Stop()
	})
}

func TestWorkersInUseAreNotReaped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithIdleTimeout(time.Second))
		release := hold(t, p, 1)
		for range 10 { // the second worker never idles a full timeout
			require.NoError(t, p.SubmitWait(func() {}))
			time.Sleep(time.Second / 2)
		}
		assert.Equal(t, 2, p.Status().Workers)
		release()
		p.Stop()
	})
}

func TestNegativeIdleTimeoutNeverReaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4, workerpool.WithIdleTimeout(-1))
		release := hold(t, p, 4)
		synctest.Wait() // four workers busy, not three and one handed the fourth task
		release()
		time.Sleep(24 * time.Hour)
		assert.Equal(t, 4, p.Status().Workers)
		p.Stop()
	})
}

// goroutineID returns the calling goroutine's id, which names the worker
// that runs a task.
func goroutineID() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)] // "goroutine 18 [running]: ..."
	id, _ := strconv.Atoi(string(bytes.Fields(buf)[1]))
	return id
}

// TestAWorkerHandedATaskAsTheClockTicksGetsNoOtherReapedEarly has four old
// workers idle since 0 s and four young ones idle since 1.5 s when, at 2 s,
// four long tasks arrive just as the reaping clock ticks (timeout 1 s). An
// old worker may run a task or be reaped, in either order, but no young
// worker, idle for half a timeout, may exit. The events come in any order,
// so the test repeats.
func TestAWorkerHandedATaskAsTheClockTicksGetsNoOtherReapedEarly(t *testing.T) {
	const n = 4
	for range 1000 {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(2*n, workerpool.WithIdleTimeout(time.Second))
			var mu sync.Mutex
			old := map[int]bool{}
			started := make(chan struct{})
			for range n {
				require.NoError(t, p.Submit(func() { <-started; time.Sleep(1500 * time.Millisecond) })) // young
			}
			for range n {
				require.NoError(t, p.Submit(func() { mu.Lock(); old[goroutineID()] = true; mu.Unlock(); <-started }))
			}
			synctest.Wait()
			require.Equal(t, 2*n, p.Status().Busy)
			close(started)

			onOld := 0
			for range n {
				go func() {
					time.Sleep(2 * time.Second)
					_ = p.Submit(func() {
						mu.Lock()
						if old[goroutineID()] {
							onOld++
						}
						mu.Unlock()
						time.Sleep(10 * time.Second)
					})
				}()
			}
			time.Sleep(2 * time.Second)
			synctest.Wait()
			assert.Equal(t, n+onOld, p.Status().Workers,
				"the %d young workers stay, and the old ones that took a task (%d)", n, onOld)
			p.Stop()
		})
	}
}

// TestAWorkerInASlowPanicHandlerGetsNoOtherReapedEarly has worker A finish a
// panicking task at 0.9 s and spend until 2.5 s in the panic handler, and
// worker B go idle at 1.1 s (timeout 1 s). At the tick at 2 s, A is not
// idle, and B has been idle for less than a timeout: neither exits.
func TestAWorkerInASlowPanicHandlerGetsNoOtherReapedEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := workerpool.New(2, workerpool.WithIdleTimeout(time.Second),
			workerpool.WithPanicHandler(func(*workerpool.PanicError) { time.Sleep(time.Until(start.Add(2500 * time.Millisecond))) }))
		require.NoError(t, p.Submit(func() { time.Sleep(900 * time.Millisecond); panic("A") }))
		require.NoError(t, p.Submit(func() { time.Sleep(1100 * time.Millisecond) }))
		time.Sleep(2*time.Second + time.Millisecond)
		assert.Equal(t, 2, p.Status().Workers, "no worker idle for a timeout at 2 s")
		time.Sleep(time.Second) // 3 s: B has been idle 1.9 s, A 0.5 s
		assert.Equal(t, 1, p.Status().Workers, "B exits within two timeouts")
		p.Stop()
	})
}

// TestAWorkerInASlowTaskObserverGetsNoOtherReapedEarly has worker A spend
// ten seconds in the task observer after its task, and worker B go idle at
// 2.8 s (timeout 1 s). At 3.2 s, A is not idle and B has been idle for
// less than a timeout: neither exits; by 5 s B has. A worker in its
// observer counted as idle from the end of its task, so the reaper took
// it for the one idle longest and quit B, parked, in its place.
func TestAWorkerInASlowTaskObserverGetsNoOtherReapedEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slow atomic.Bool // the first observer call takes it and sleeps
		slow.Store(true)
		p := workerpool.New(2, workerpool.WithIdleTimeout(time.Second),
			workerpool.WithTaskObserver(func(workerpool.TaskTiming) {
				if slow.CompareAndSwap(true, false) {
					time.Sleep(10 * time.Second)
				}
			}))
		defer p.Stop()
		require.NoError(t, p.Submit(func() {}))                                      // A: then ten seconds in the observer
		require.NoError(t, p.Submit(func() { time.Sleep(2800 * time.Millisecond) })) // B: idle from 2.8 s
		time.Sleep(3200 * time.Millisecond)
		assert.Equal(t, 2, p.Status().Workers, "no worker idle for a timeout at 3.2 s")
		time.Sleep(1800 * time.Millisecond) // 5 s: B has been idle 2.2 s
		assert.Equal(t, 1, p.Status().Workers, "B exits within two timeouts")
	})
}

// Guarantee 8: "no worker exits before it has been idle for one [timeout]:
// not ... nor when one sits in a slow panic handler".
// TestAWorkerInASlowPanicHandlerGetsNoOtherReapedEarly covers a plain
// Submit's panic; here the panicking task is also a Local.Submit task (a
// waiter internally). Were its worker stamped idle before the handler runs,
// the reaper would count it idle and quit the parked worker instead, after
// 0.2s of idleness.
func TestASlowPanicHandlerOfALocalTaskGetsNoOtherReapedEarly(t *testing.T) {
	for _, kind := range []string{"Submit", "Local.Submit"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2, workerpool.WithIdleTimeout(time.Second),
					workerpool.WithPanicHandler(func(*workerpool.PanicError) { time.Sleep(10 * time.Second) }))
				defer p.Stop()
				local := workerpool.NewLocal(func() (int, error) { return 0, nil }, nil)
				if kind == "Submit" {
					_ = p.Submit(func() { panic("a") })
				} else {
					_ = local.Submit(p, func(int) { panic("a") })
				}
				_ = p.Submit(func() { time.Sleep(2800 * time.Millisecond) }) // the other worker: idle from 2.8s
				synctest.Wait()
				time.Sleep(3200 * time.Millisecond) // t=3.2s: the other has been idle 0.4s
				synctest.Wait()
				if w := p.Status().Workers; w != 2 {
					t.Errorf("at t=3.2s a worker idle for 0.4s (timeout 1s) was reaped while the other sat in a slow panic handler: Workers=%d, want 2", w)
				}
			})
		})
	}
}
