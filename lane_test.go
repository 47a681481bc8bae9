package workerpool_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The memory a waiting task takes in its lane, and what is left once the
// queue drains: of the tasks, and of their keys' lines.

// queuedTasks is how many tasks the memory tests queue: a million, as the
// performance targets state them, when the long runs are on ([longRuns]) and
// the race detector, which makes each Submit several times slower, is off;
// 2^16 otherwise: the bounds stay the same, but they say less about a large
// queue. CI runs them at a million.
func queuedTasks() int {
	if !longRuns || raceEnabled {
		return 1 << 16
	}
	return 1_000_000
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// pausedPool returns a pool of one worker, paused, so that every task
// submitted to it waits in the queue until resume is called.
func pausedPool(t *testing.T) (p *workerpool.Pool, resume func()) {
	t.Helper()
	p = workerpool.New(1)
	ctx, resume := context.WithCancel(context.Background())
	p.Pause(ctx) // returns at once: nothing runs
	require.Equal(t, workerpool.Paused, p.Status().State)
	return p, resume
}

// drain resumes p and returns once every queued task has run and the
// pool is at rest. It runs in a synctest bubble, whose Wait says when.
func drain(t *testing.T, p *workerpool.Pool, resume func()) {
	t.Helper()
	resume()
	synctest.Wait()
	s := p.Status()
	require.Zero(t, s.Waiting)
	require.Zero(t, s.Busy)
	require.Equal(t, s.Submitted, s.Completed)
}

// TestMemoryOfAWaitingTaskIs12BytesBeyondItsClosure queues one prepared
// func a million times, so that no closure is allocated per task: the heap's
// growth is the queue's own cost per waiting task, 12 bytes (a func value's 8
// and 4 for its place in the order the pool accepted it), 16 with task
// timings (4 for when it was accepted). It holds however the tasks come: to
// the pool's own queue, to two sub-pools in turn (which used to cost 25
// bytes a task: the order was kept as runs of consecutive numbers, one
// task long each), or with one key. A queue grows by doubling, so it may
// hold room for up to as many again: the bound allows the spare room of
// 2^20 slots for a million tasks, and nothing more. Once the queue drains,
// the heap returns to where it started: the queue gives its memory back.
func TestMemoryOfAWaitingTaskIs12BytesBeyondItsClosure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		timed  bool
		submit func(p *workerpool.Pool, a, b *workerpool.Subpool, i int, task func()) error
	}{
		{"the pool's own queue", false, func(p *workerpool.Pool, _, _ *workerpool.Subpool, _ int, task func()) error { return p.Submit(task) }},
		{"two sub-pools in turn", false, func(_ *workerpool.Pool, a, b *workerpool.Subpool, i int, task func()) error {
			if i%2 == 0 {
				return a.Submit(task)
			}
			return b.Submit(task)
		}},
		{"one key", false, func(p *workerpool.Pool, _, _ *workerpool.Subpool, _ int, task func()) error {
			return p.SubmitKey("k", task)
		}},
		{"timed", true, func(p *workerpool.Pool, _, _ *workerpool.Subpool, _ int, task func()) error { return p.Submit(task) }},
		{"timed, two sub-pools in turn", true, func(_ *workerpool.Pool, a, b *workerpool.Subpool, i int, task func()) error {
			if i%2 == 0 {
				return a.Submit(task)
			}
			return b.Submit(task)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testMemoryOfAWaitingTask(t, tc.timed, tc.submit) })
		})
	}
}

func testMemoryOfAWaitingTask(t *testing.T, timed bool, submit func(p *workerpool.Pool, a, b *workerpool.Subpool, i int, task func()) error) {
	n := queuedTasks()
	var ran atomic.Int64
	task := func() { ran.Add(1) }
	var opts []workerpool.Option
	bound := 12.0
	if timed {
		opts, bound = append(opts, workerpool.WithTaskTimings()), 16.0
	}
	p := workerpool.New(1, opts...)
	ctx, resume := context.WithCancel(context.Background())
	p.Pause(ctx)
	defer p.Stop()
	a, b := p.Subpool("a", 1), p.Subpool("b", 1)

	before := liveHeap()
	for i := range n {
		if err := submit(p, a, b, i, task); err != nil {
			require.NoError(t, err)
		}
	}
	queued := liveHeap()
	require.Equal(t, n, p.WaitingQueueSize())
	perTask := float64(int64(queued)-int64(before)) / float64(n)
	room := 1
	for room < n {
		room *= 2
	}
	spare := float64(room) / float64(n) // the queues' doubling room
	t.Logf("%d queued tasks: %.2f bytes each (bound %.0f, %.2f with the spare room)", n, perTask, bound, bound*spare)
	assert.LessOrEqual(t, perTask, bound*spare+0.05, "bytes per waiting task beyond its closure")

	drain(t, p, resume)
	assert.Equal(t, int64(n), ran.Load())
	after := liveHeap()
	t.Logf("heap: %d B before, %d B queued, %d B drained", before, queued, after)
	assert.LessOrEqual(t, int64(after)-int64(before), int64(heapMargin),
		"the heap returns to its starting size once the queue drains")
}

// payload is what a test's closure holds, so that a weak pointer to it
// says whether the closure can still be reached.
type payload struct {
	id  int
	pad [48]byte
}

// reachable collects garbage and returns how many of ws still point to a
// live object.
func reachable(ws []weak.Pointer[payload]) int {
	runtime.GC()
	kept := 0
	for _, w := range ws {
		if w.Value() != nil {
			kept++
		}
	}
	return kept
}

// heapMargin is how far the live heap may stay above its starting size
// after a drain: room for the runtime's and the test framework's own
// allocations, and a thousandth of the 8 MB a million queued tasks take.
const heapMargin = 64 << 10

// TestMemoryOfFinishedTasksIsReleased queues a million closures, each holding
// its own object, drains them with the pool still running, and checks with weak
// pointers that a sample of the objects, the first and the last among them,
// were collected: neither the queue nor an idle worker keeps a finished task's
// closure alive. The heap also returns to its starting size.
func TestMemoryOfFinishedTasksIsReleased(t *testing.T) {
	synctest.Test(t, testMemoryOfFinishedTasks)
}

func testMemoryOfFinishedTasks(t *testing.T) {
	n := queuedTasks()
	const every = 997 // sample about a thousand of a million, at varied offsets
	var ran atomic.Int64
	p, resume := pausedPool(t)
	defer p.Stop()

	before := liveHeap()
	var sample []weak.Pointer[payload]
	for i := range n {
		obj := &payload{id: i}
		if i%every == 0 || i == n-1 {
			sample = append(sample, weak.Make(obj))
		}
		err := p.Submit(func() {
			if obj.id == i {
				ran.Add(1)
			}
		})
		if err != nil {
			require.NoError(t, err)
		}
	}
	drain(t, p, resume)
	require.Equal(t, int64(n), ran.Load())

	after := liveHeap()
	kept := reachable(sample)
	assert.Zero(t, kept, "of %d sampled finished closures, %d are still reachable", len(sample), kept)
	assert.LessOrEqual(t, int64(after)-int64(before), int64(heapMargin),
		"the heap returns to its starting size once the queue drains: %d B before, %d B after", before, after)
	runtime.KeepAlive(p)
}

// TestAnIdleKeyCostsNothing queues tasks with a hundred thousand distinct
// keys on a paused pool, runs them, and checks that the heap goes back to
// where it started: no key keeps memory once its tasks are done.
func TestAnIdleKeyCostsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 100_000
		if !longRuns || raceEnabled {
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

// endOneAtATime runs n tasks one after another, each holding a payload:
// run gives the pool a task and returns once it has ended. It asserts that
// the live heap returns to within 256 KiB of where it started and, in a
// synctest bubble, where synctest.Wait says when the pool is at rest, that
// a sample of the payloads can all be collected. n is a fifth under the
// race detector.
func endOneAtATime(t *testing.T, inBubble bool, run func(f func())) {
	t.Helper()
	n := 20_000
	if raceEnabled {
		n /= 5
	}
	for range 100 { // warm: the workers, their stacks, the key cache
		run(func() {})
	}
	settle := func() {
		if inBubble {
			synctest.Wait()
		}
	}
	settle()
	before := liveHeap()
	var sample []weak.Pointer[payload]
	for i := range n {
		obj := &payload{id: i}
		if i%1000 == 0 {
			sample = append(sample, weak.Make(obj))
		}
		run(func() { _ = obj.id })
	}
	settle()
	grew := int64(liveHeap()) - int64(before)
	t.Logf("the heap grew by %d B over %d finished tasks (%.1f B a task)", grew, n, float64(grew)/float64(n))
	assert.LessOrEqual(t, grew, int64(256<<10), "the heap returns to its starting size once the tasks have ended")
	if inBubble {
		assert.Zero(t, reachable(sample), "of %d sampled finished closures, none is still reachable", len(sample))
	}
}

// TestFinishedSubpoolTasksLeaveNothingBehind runs a sub-pool's tasks one at
// a time, each taken by a parked worker, in a bubble and on the real
// scheduler: once they have ended, the heap is back at its starting size
// and their closures can be collected. The dispatcher used to collect the
// workers' reports of sub-pool tasks' ends only when it left its quiet
// loop, which a pool never busier than this does not: it kept every
// finished task's closure (211 B a task).
func TestFinishedSubpoolTasksLeaveNothingBehind(t *testing.T) {
	t.Run("SubmitWait in a bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(2)
			defer p.Stop()
			s := p.Subpool("s", 2) // a limit at the pool's maximum holds nothing back
			endOneAtATime(t, true, func(f func()) { require.NoError(t, s.SubmitWait(f)) })
		})
	})
	t.Run("Submit on the real scheduler", func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		s := p.Subpool("s", 2)
		done := make(chan struct{})
		endOneAtATime(t, false, func(f func()) {
			require.NoError(t, s.Submit(func() { f(); done <- struct{}{} }))
			<-done
		})
	})
}

// TestAKeyCostsNoMemoryOnceItsTaskEnded runs tasks of distinct keys one at
// a time, each taken by a parked worker, in a bubble and on the real
// scheduler: once they have ended, neither the keys nor the closures take
// memory. The key lines of tasks that ended while the dispatcher stayed in
// its quiet loop were never given back: 293 B a key.
func TestAKeyCostsNoMemoryOnceItsTaskEnded(t *testing.T) {
	runKeyed := func(t *testing.T, inBubble bool) {
		p := workerpool.New(2)
		defer p.Stop()
		keys := make([]string, 30_000)
		for i := range keys {
			keys[i] = fmt.Sprint("key-", i)
		}
		next := 0
		done := make(chan struct{})
		endOneAtATime(t, inBubble, func(f func()) {
			require.NoError(t, p.SubmitKey(keys[next], func() { f(); done <- struct{}{} }))
			next++
			<-done
		})
		runtime.KeepAlive(keys) // live throughout: not part of the difference
	}
	t.Run("in a bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { runKeyed(t, true) })
	})
	t.Run("on the real scheduler", func(t *testing.T) { runKeyed(t, false) })
}

// TestTheTasksASubpoolsStopDroppedCanBeCollected has a sub-pool's Stop
// take its tasks back from the hand-off buffer and its caller drop them:
// while the pool goes on, nothing of it keeps them reachable. The Stop kept
// the dropped tasks in a scratch slice of the dispatcher's.
func TestTheTasksASubpoolsStopDroppedCanBeCollected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		defer p.Stop()
		s := p.Subpool("s", 1)
		release := hold(t, p, 1) // the one worker is busy: s's tasks wait in the buffer
		synctest.Wait()
		var sample []weak.Pointer[payload]
		for i := range 20 {
			obj := &payload{id: i}
			sample = append(sample, weak.Make(obj))
			require.NoError(t, s.Submit(func() { _ = obj.id }))
		}
		synctest.Wait()
		require.Len(t, s.Stop(), 20, "Stop returns every task")
		release()
		for range 10 { // the pool goes on
			require.NoError(t, p.SubmitWait(func() {}))
		}
		synctest.Wait()
		assert.Zero(t, reachable(sample), "of %d dropped tasks, none is still reachable", len(sample))
	})
}

// TestTheLastTaskOfEveryKindCanBeCollectedOnceItEnds runs one task of each
// kind and lets the workers park: none of the closures is still reachable.
// The last sub-pool task and the last keyed task were, until the pool was
// next busy: the dispatcher had not collected the reports of their ends.
func TestTheLastTaskOfEveryKindCanBeCollectedOnceItEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		s := p.Subpool("s", 2)
		kinds := []struct {
			name string
			run  func(f func())
		}{
			{"SubmitWait", func(f func()) { require.NoError(t, p.SubmitWait(f)) }},
			{"Call", func(f func()) {
				_, err := workerpool.Call(context.Background(), p, func(context.Context) (int, error) { f(); return 0, nil })
				require.NoError(t, err)
			}},
			{"sub-pool SubmitWait", func(f func()) { require.NoError(t, s.SubmitWait(f)) }},
			{"SubmitKey", func(f func()) { require.NoError(t, p.SubmitKey("k", f)) }},
			{"Group.Go", func(f func()) {
				g := p.Group(context.Background())
				g.Go(func(context.Context) error { f(); return nil })
				require.NoError(t, g.Wait())
			}},
		}
		sample := make([]weak.Pointer[payload], len(kinds))
		for i, k := range kinds {
			obj := &payload{id: i}
			sample[i] = weak.Make(obj)
			k.run(func() { _ = obj.id })
		}
		synctest.Wait()
		runtime.GC()
		for i, k := range kinds {
			assert.True(t, sample[i].Value() == nil, "the last %s task's closure is still reachable", k.name)
		}
	})
}

// TestTheFirstTaskOfAQueueCostsLittle: the first task to wait in a quiet
// sub-pool's queue costs at most 64 bytes beyond its closure (a queue's
// buffers start at one slot), and the first of a key's line, which the
// key holds only while a task of it waits or runs, at most 512.
func TestTheFirstTaskOfAQueueCostsLittle(t *testing.T) {
	const n = 10_000
	task := func() {}
	for _, tc := range []struct {
		name  string
		most  float64
		keyed bool
	}{
		{"a sub-pool's queue", 64, false},
		{"a key's line", 512, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, resume := pausedPool(t)
			defer resume()
			subs := make([]*workerpool.Subpool, n)
			keys := make([]string, n)
			for i := range n {
				subs[i] = p.Subpool(strconv.Itoa(i), 1)
				keys[i] = strconv.Itoa(i) // made before: the key's string is the caller's
			}
			before := liveHeap()
			for i := range n {
				if tc.keyed {
					require.NoError(t, p.SubmitKey(keys[i], task))
				} else {
					require.NoError(t, subs[i].Submit(task))
				}
			}
			per := float64(int64(liveHeap())-int64(before)) / n
			t.Logf("%s with one task waiting: %.1f B", tc.name, per)
			assert.LessOrEqual(t, per, tc.most, "the first task of %s", tc.name)
			runtime.KeepAlive(subs)
			runtime.KeepAlive(keys)
		})
	}
}
