//go:build workerpool_checkloop

package workerpool

import "fmt"

// checkLoop checks, in the build with the tag workerpool_checkloop, that
// the loop keeps its invariant before it waits, and panics if not: CI runs
// the tests and the fuzzers in this build. The invariant: the tasks in
// hand are published; and unless the pool is paused or dropping its
// queue, the next task the scheduler would hand out cannot go now, and
// the loop will hear when it can: every worker is started, and the task
// goes only to a free worker, none is, and the loop listens for one; or it
// may wait in the buffer, which is full, and the select offers it.
func checkLoop(d *dispatcher) {
	if got, want := d.p.stats.inHand.Load(), uint64(d.sched.waiting)+d.handed; got != want {
		panic(fmt.Sprintf("workerpool: loop: %d tasks in hand published, %d waiting and %d handed out", got, d.sched.waiting, d.handed))
	}
	if d.paused || d.dropping || d.sched.waiting == 0 {
		return
	}
	e, ok := d.sched.peek()
	if !ok {
		if !d.listening {
			panic("workerpool: loop: no waiting task may start, and the loop does not listen for the ends that free them")
		}
		return
	}
	if d.working() < d.max {
		panic(fmt.Sprintf("workerpool: loop: task %d may start, and %d workers are below the maximum %d", e.seq, d.working(), d.max))
	}
	if _, offering := d.offerable(); offering {
		return // the select offers it to the full buffer
	}
	if !d.listening {
		panic(fmt.Sprintf("workerpool: loop: task %d waits (direct %v, %d of %d in the buffer, %d pending), and the loop does not listen",
			e.seq, !d.mayBuffer(e.lane), len(d.p.work), cap(d.p.work), d.out.pending()))
	}
}
