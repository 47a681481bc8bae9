package workerpool

import "slices"

// Giving up. A Call whose context is done before its fn starts, and the
// tasks of a Group or a Map whose context is done, leave the queue at once:
// they never run, and a bounded queue has room again. Their submitter first
// takes them back (claimState.giveUp), so that no worker starts them, then
// asks the dispatcher to remove them from the scheduler. A worker that gets
// one anyway, from the hand-off buffer, skips it.

// A cancelable is a waiter whose submitter may give up on it before it
// starts.
type cancelable interface {
	waiter
	giveUp() bool
	gaveUp() bool
	spot() *queueSpot
}

// A queueSpot is where a cancelable task waits: its lane and its seq, which
// the dispatcher records when it accepts the task and reads when the
// submitter gives up on it. Only the dispatcher touches it.
type queueSpot struct {
	lane *lane
	seq  uint64
}

// giveUp takes back the tasks in ws that the pool has not claimed, tells
// the dispatcher to remove them from the queue, and counts them Canceled.
// It reports how many it took back.
func (p *Pool) giveUp(ws []cancelable) int {
	back := ws[:0:0]
	for _, w := range ws {
		if w.giveUp() {
			back = append(back, w)
		}
	}
	if len(back) == 0 {
		return 0
	}
	p.stats.canceled.Add(uint64(len(back)))
	p.request(&request{kind: cancelRequest, cancel: back})
	return len(back)
}

// cancel removes from the scheduler the tasks in ws, which their submitters
// took back. One that is not there may be in the hand-off buffer: then the
// buffer goes back to the scheduler, and it is removed from there. One that
// is not there either is in a worker's hands, and the worker skips it.
func (d *dispatcher) cancel(ws []cancelable) {
	var missed []cancelable
	for _, w := range ws {
		at := w.spot()
		if at.lane == nil {
			continue // never queued: it was to run in its submitter
		}
		if sub := d.subpool(at.lane); sub != nil {
			sub.stats.canceled.Add(1)
		}
		if !d.cancelAt(*at) {
			missed = append(missed, w)
		}
	}
	if len(missed) > 0 && len(d.p.work) > 0 {
		d.requeue()
		for _, w := range missed {
			d.cancelAt(*w.spot())
		}
	}
	d.publishWaiting()
	d.fill()
}

// cancelAt removes the task waiting at spot from the scheduler, or from
// limbo (see requeue), and reports whether it was in either.
func (d *dispatcher) cancelAt(at queueSpot) bool {
	if d.sched.cancel(at.lane, at.seq) {
		return true
	}
	i := slices.IndexFunc(d.limbo, func(e entry) bool { return e.lane == at.lane && e.seq == at.seq })
	if i < 0 {
		return false
	}
	d.sched.ended(d.limbo[i]) // it was out, and never ran
	d.limbo = slices.Delete(d.limbo, i, i+1)
	return true
}

// noteSpot records where e, a task just accepted, waits, if its submitter
// may give up on it.
func noteSpot(e entry) {
	if c, ok := e.w.(cancelable); ok {
		*c.spot() = queueSpot{lane: e.lane, seq: e.seq}
	}
}
