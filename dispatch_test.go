package workerpool_test

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests of the dispatcher's loop: it starts workers up to the maximum
// and no further, hands tasks to idle workers first, lets workers run while
// submitters keep it busy, and wakes when a worker reports a task's end.

func TestNeverMoreThanMaxTasksRunAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const max = 4
		p := workerpool.New(max)
		var running, peak atomic.Int64
		for i := range 200 {
			require.NoError(t, p.Submit(func() {
				n := running.Add(1)
				for {
					old := peak.Load()
					if n <= old || peak.CompareAndSwap(old, n) {
						break
					}
				}
				time.Sleep(time.Duration(i%7) * time.Millisecond)
				running.Add(-1)
			}))
		}
		p.StopWait()
		assert.Equal(t, int64(max), peak.Load(), "peak concurrency reaches the maximum and no more")
		assert.Equal(t, max, p.Status().PeakWorkers)
		assert.Equal(t, uint64(200), p.Status().Completed)
	})
}

func TestTasksGoToIdleWorkersBeforeNewOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		for range 10 {
			require.NoError(t, p.Submit(func() {}))
			synctest.Wait() // the worker is back and idle
		}
		assert.Equal(t, 1, p.Status().Workers, "sequential tasks reuse the idle worker")
		p.Stop()
	})
}

func TestWorkersRunWhileSubmittersHammerOneP(t *testing.T) {
	// With one P, the dispatcher and busy submitters ready each other in
	// turn; the pool must still let its workers run.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := workerpool.New(1)
	var ran atomic.Int64
	task := func() { ran.Add(1) }
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for p.Submit(task) == nil {
			}
		})
	}
	giveUp := time.Now().Add(10 * time.Second) // a bound on failure only; it passes in milliseconds
	for ran.Load() < 1000 && time.Now().Before(giveUp) {
		runtime.Gosched()
	}
	assert.GreaterOrEqual(t, ran.Load(), int64(1000), "the worker ran while submitters kept submitting")
	p.Stop()
	wg.Wait()
}

// ---------------------------------------------------------------------------
// Liveness where the loop waits for a worker's report of a task's end: a
// freed key, a sub-pool under its limit again, a sub-pool's Stop. No
// reaping clock runs (a negative idle timeout), so nothing but the report
// can wake the dispatcher.

// TestAKeysNextTaskStartsWhenTheKeyIsFree: k1 (short) then k2, same
// key, on an idle pool; k2 must start once k1 ends.
func TestAKeysNextTaskStartsWhenTheKeyIsFree(t *testing.T) {
	p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
	defer p.Stop()
	for round := range 20000 {
		ran := make(chan struct{})
		atkNoErr(t, p.SubmitKey("k", func() {}))
		atkNoErr(t, p.SubmitKey("k", func() { close(ran) }))
		select {
		case <-ran:
		case <-time.After(2 * time.Second):
			time.Sleep(atkLongWait)
			st := p.Status()
			t.Fatalf("round %d: k2 has not started 2s (+%v) after k1 ended (Busy %d, Idle %d, Waiting %d, Completed %d of %d)", round, atkLongWait, st.Busy, st.Idle, st.Waiting, st.Completed, st.Submitted)
		}
	}
}

// TestASubpoolsNextTaskStartsWhenItIsUnderItsLimit: a sub-pool of
// limit 1 on a pool of 2: a1 (short) then a2; a2 must start once a1 ends.
func TestASubpoolsNextTaskStartsWhenItIsUnderItsLimit(t *testing.T) {
	p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
	defer p.Stop()
	a := p.Subpool("a", 1)
	for round := range 20000 {
		ran := make(chan struct{})
		atkNoErr(t, a.Submit(func() {}))
		atkNoErr(t, a.Submit(func() { close(ran) }))
		select {
		case <-ran:
		case <-time.After(2 * time.Second):
			time.Sleep(atkLongWait)
			st := a.Status()
			t.Fatalf("round %d: a2 has not started 2s (+%v) after a1 ended (sub-pool Busy %d, Waiting %d, Completed %d of %d)", round, atkLongWait, st.Busy, st.Waiting, st.Completed, st.Submitted)
		}
	}
}

// TestSubpoolStopReturnsOnceItsTasksEnd: a sub-pool with no limit of
// its own runs a stream of tiny tasks; its Stop must return once they end.
func TestSubpoolStopReturnsOnceItsTasksEnd(t *testing.T) {
	for round := range rounds(2000) {
		p := workerpool.New(4, workerpool.WithIdleTimeout(-1))
		a := p.Subpool("a", 4)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for a.Submit(func() {}) == nil {
			}
		}()
		for a.Status().Completed < 200 {
			runtime.Gosched()
		}
		stopped := make(chan struct{})
		go func() { a.Stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(3 * time.Second):
			st := a.Status()
			t.Fatalf("round %d: the sub-pool's Stop has not returned 3s later (Busy %d, Waiting %d, Completed %d of %d, State %v)", round, st.Busy, st.Waiting, st.Completed, st.Submitted, st.State)
		}
		<-done
		p.Stop()
	}
}

// atkLongWait is how much longer a stalled test waits before it reports,
// to show the stall lasts.
const atkLongWait = 5 * time.Second

// TestAKeyedTaskAcceptedWhileTheLoopIsQuietFreesItsKeyOnceItEnds: a keyed
// task, of the pool's own queue or of a sub-pool's, comes to a pool whose
// loop is quiet (nothing waits, nothing runs). Once it has ended, and
// with no submission or request after it, its key line is gone: its
// key's name can be collected. The quiet hole of issue 35: such a task
// left the loop quiet, so its end was not collected until the next keyed
// or sub-pool submission or request, and its key line (and its
// sub-pool's count of running tasks, which the API does not show) was
// held meanwhile, also after a plain Submit.
func TestAKeyedTaskAcceptedWhileTheLoopIsQuietFreesItsKeyOnceItEnds(t *testing.T) {
	for _, where := range []string{"the pool's own queue", "a sub-pool"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2)
				defer p.Stop()
				s := p.Subpool("s", 1)
				submit := p.SubmitKey
				if where == "a sub-pool" {
					submit = s.SubmitKey
				}
				ended := make(chan struct{})
				name := submitWithAFreshKey(t, submit, func() { close(ended) })
				<-ended
				synctest.Wait() // the worker parked, the loop waits: nothing else comes
				runtime.GC()
				assert.Nil(t, name.Value(), "guarantees.md 16: a key costs memory only while a task with it waits or runs; its task ended, and its key line still holds its name")
				require.NoError(t, p.SubmitWait(func() {}), "a plain task")
				synctest.Wait()
				runtime.GC()
				assert.Nil(t, name.Value(), "guarantees.md 16: after a plain task too")
				st := s.Status()
				assert.Zero(t, st.Busy+st.Waiting, "the sub-pool's task ended")
				assertBalanced(t, p.Status())
			})
		})
	}
}

// submitWithAFreshKey submits task with submit under a key made for it,
// and returns a weak pointer to the key's name: nothing but the pool
// refers to it once this returns. The name is 64 bytes, an object of its
// own (the tiny allocator packs smaller ones together).
//
//go:noinline
func submitWithAFreshKey(t *testing.T, submit func(string, func()) error, task func()) weak.Pointer[byte] {
	key := strings.Repeat("k", 64)
	name := weak.Make(unsafe.StringData(key))
	require.NoError(t, submit(key, task))
	return name
}

// TestStopWaitReturnsWhileWorkersEmptyTheOutbox: StopWait while the pool's
// tasks sit in the outbox and workers that are never reaped take them:
// nothing but the outbox's emptying can wake the loop, which waits for it
// before it finishes. Every StopWait returns, within 5s, and every task
// ran. A review found a lost wake-up: the last task left the outbox
// between the loop's two looks at it, and StopWait hung (15 of 30 runs of
// 3,000 rounds under -race).
func TestStopWaitReturnsWhileWorkersEmptyTheOutbox(t *testing.T) {
	for round := range rounds(8000) {
		max := 1 + round%3
		opt := workerpool.WithIdleTimeout(-1)
		if round%2 == 0 {
			opt = workerpool.WithMinWorkers(max)
		}
		p := workerpool.New(max, opt)
		var ran atomic.Int64
		n := max + 2 + round%7
		for range n {
			require.NoError(t, p.Submit(func() {
				for range round % 50 {
					runtime.Gosched()
				}
				ran.Add(1)
			}))
		}
		done := make(chan struct{})
		go func() { p.StopWait(); close(done) }()
		require.True(t, waitOrTimeout(done, 5*time.Second),
			"round %d: guarantees.md 3: StopWait of a pool of %d with %d tasks still waits after 5s; ran %d; %s", round, max, n, ran.Load(), fmtStatus(p.Status()))
		require.Equal(t, int64(n), ran.Load(), "round %d: guarantees.md 2: StopWait runs every task", round)
	}
}
