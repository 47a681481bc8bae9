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
