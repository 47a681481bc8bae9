//go:build workerpool_checkloop

package workerpool

import (
	"fmt"

	"github.com/dispatchkit/workerpool/internal/handoff"
)

// checkLoop checks, in the build with the tag workerpool_checkloop, that
// the loop keeps its invariant before it waits, and panics if not: CI runs
// the tests and the pool's fuzzer in this build. The invariant: the tasks
// in hand are published; and unless the pool is paused or dropping its
// queue, a waiting task that may start but did not go is one the loop will
// hear of: it listens to the hand-off for what lets it go (a parked worker
// for a direct task, room in the outbox for the others), or a signal is
// pending already. If no waiting task may start, a task runs whose end may
// free one, and the loop listens for ends.
func checkLoop(d *loop) {
	if got, want := d.s.stats.inHand.Load(), uint64(d.sched.Waiting())+d.handed; got != want {
		panic(fmt.Sprintf("workerpool: loop: %d tasks in hand published, %d waiting and %d handed out", got, d.sched.Waiting(), d.handed))
	}
	// What the loop listens for, then whether a signal is pending: a signal
	// clears what it listened for, so read in this order, a pending signal
	// is seen whenever the listening is not.
	wanted := d.h.Wanted()
	if d.paused || d.dropping || d.sched.Waiting() == 0 || len(d.s.wake) > 0 {
		return
	}
	e, ok := d.sched.Peek()
	switch {
	case !ok && d.paceC != nil:
		// A rate holds the next task back: the timer wakes the loop.
	case !ok && d.closed:
		// Stranded or not, checkStranded looks once no other task runs.
	case !ok:
		if d.sched.Reported() == 0 || wanted&handoff.WantEnds == 0 {
			panic(fmt.Sprintf("workerpool: loop: no waiting task may start (%d wait), and the loop does not listen for the ends that free them (%d reported, listening %b, %d stoppers %d waiters %d lent)", d.sched.Waiting(), d.sched.Reported(), wanted, d.stoppers, d.waiters, d.lent))
		}
	case d.sched.MayBuffer(e.Queue):
		if wanted&handoff.WantRoom == 0 {
			panic(fmt.Sprintf("workerpool: loop: task %d may wait in the outbox, and the loop does not listen for room", e.Seq))
		}
	default:
		if wanted&handoff.WantPark == 0 {
			panic(fmt.Sprintf("workerpool: loop: task %d goes to a free worker, and the loop does not listen for one", e.Seq))
		}
	}
}
