package workerpool_test

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

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
