//go:build workerpool_checkloop

package workerpool

import "fmt"

// checkLoop checks, in the build with the tag workerpool_checkloop, that
// the loop keeps its invariant (see dispatcher) before it waits, and
// panics if not: CI runs the tests and the fuzzers in this build. Workers
// run meanwhile, so where one may have come free or claimed a hand-off
// since the loop looked, the invariant holds if the loop has asked to hear
// of it (the want* bits): the select then wakes at once.
func checkLoop(d *dispatcher) {
	if got, want := d.p.stats.inHand.Load(), uint64(d.sched.waiting)+d.handed; got != want {
		panic(fmt.Sprintf("workerpool: loop: %d tasks in hand published, %d waiting and %d handed out", got, d.sched.waiting, d.handed))
	}
	if !d.canFill() {
		return // paused, dropping, nothing waits, or no room under the maximum
	}
	e, ok := d.sched.peek()
	if !ok {
		return // nothing that waits may start
	}
	if len(d.p.wake) > 0 {
		return // a worker has signalled since the loop looked: it looks again
	}
	if d.workers() < d.max {
		panic(fmt.Sprintf("workerpool: loop: task %d may start, and %d workers are below the maximum %d", e.seq, d.workers(), d.max))
	}
	if d.workers() > d.max {
		// Surplus workers are leaving: each that ends a task retires and
		// signals, and fill weighs the next hand-out then.
		if d.wants&wantRetire == 0 {
			panic(fmt.Sprintf("workerpool: loop: task %d may start, and surplus workers do not retire", e.seq))
		}
		return
	}
	// Why the next task waits, and who wakes the loop when that changes.
	ahead := d.ahead(e.lane)
	need := func(bit uint32, why string) {
		if d.wants&bit == 0 {
			panic(fmt.Sprintf("workerpool: loop: task %d waits (ahead %d, %d of %d in the buffer, %d pending): %s, and the loop does not hear of it (wants %b)",
				e.seq, ahead, len(d.p.work), cap(d.p.work), d.out.pending(), why, d.wants))
		}
	}
	switch {
	case ahead > 1 && d.out.allOf(e.lane):
		// Fill found the buffer full (workers may have made room since):
		// the select offers the task, and sends it when there is room.
		if _, ok := d.offer(); !ok {
			panic(fmt.Sprintf("workerpool: loop: task %d may wait in the buffer, and is not offered", e.seq))
		}
	case ahead == 0:
		need(wantIdle, "it may go only to a free worker")
		if len(d.p.work) > 0 {
			need(wantReceipts, "the buffer holds hand-offs that a free worker takes first")
		}
	default:
		need(wantReceipts, "it may wait in the buffer only alone, or not behind another lane's tasks")
	}
}
