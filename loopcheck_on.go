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
	if got := d.p.stats.waiting.Load(); got != int64(d.sched.waiting) {
		panic(fmt.Sprintf("workerpool: loop: Waiting published %d, the scheduler holds %d", got, d.sched.waiting))
	}
	if got := d.p.stats.handed.Load(); got != d.handed {
		panic(fmt.Sprintf("workerpool: loop: handed published %d, counted %d", got, d.handed))
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
	ahead := d.ahead(e.lane)
	switch {
	case ahead == 0:
		if d.spareWorker() && d.wants&wantIdle == 0 {
			panic(fmt.Sprintf("workerpool: loop: task %d may go only to a free worker, one is free, and the loop does not hear of it", e.seq))
		}
	case ahead == 1 || !d.out.allOf(e.lane):
		if d.wants&wantReceipts == 0 {
			panic(fmt.Sprintf("workerpool: loop: task %d waits for the buffer (ahead %d, all of its lane %v, %d in it, %d pending), and the loop does not hear of receipts (wants %b)",
				e.seq, ahead, d.out.allOf(e.lane), len(d.p.work), d.out.pending(), d.wants))
		}
	default:
		if _, ok := d.offer(); !ok {
			panic(fmt.Sprintf("workerpool: loop: task %d may wait in the buffer, and is not offered", e.seq))
		}
	}
}
