package workerpool

import "sync/atomic"

// Giving up. A Call whose context is done before its fn starts, and the
// tasks of a Group or a Map whose context is done, leave the queue at once:
// they never run, and a bounded queue has room again. Their submitter first
// takes them back (takeState.giveUp), so that no worker starts them and no
// stop drops them; then it asks the dispatcher to remove them: from the
// scheduler, or, if one was handed out and no worker has claimed it yet,
// by revoking its hand-off. A worker that claimed one first skips it, and
// reports that it did.
//
// Each task given up is counted Canceled once, as soon as the pool learns
// of it: the dispatcher counts it from its submitter's request, from a
// worker's report, or as it drops or starts the task itself and finds it
// given up; a Group that gives up a task as a worker takes it counts it
// there. So when the request is answered the task is counted, and the
// dispatcher, which learns of every task it accepted before it finishes,
// has counted them all when it does.

// A cancelable is a waiter whose submitter may give up on it before it
// starts.
type cancelable interface {
	waiter
	giveUp() bool
	spot() *queueSpot
}

// A queueSpot is where a cancelable task waits: its lane and its seq, which
// the dispatcher records when it accepts the task and reads when the
// submitter gives up on it; and whether the task is counted Canceled,
// which whoever counts it sets first.
type queueSpot struct {
	lane    *lane
	seq     uint64
	counted atomic.Bool
}

// giveUp takes back the tasks in ws, submitted to s, that the pool has not
// taken, and has the dispatcher remove them from the queue and count them
// Canceled, in the pool and in s if it is a sub-pool. It returns once they
// are counted, and reports how many it took back.
func (p *Pool) giveUp(s Submitter, ws []cancelable) int {
	back := ws[:0:0]
	for _, w := range ws {
		if w.giveUp() {
			back = append(back, w)
		}
	}
	if len(back) == 0 {
		return 0
	}
	r := &request{kind: cancelRequest, cancel: back, done: make(chan struct{})}
	if p.request(r) {
		<-r.done
		return len(back)
	}
	// The dispatcher has finished: it counted every task it accepted. A
	// task that was to run in its submitter, under CallerRuns, it never
	// saw: that one is counted here.
	for _, w := range back {
		if w.spot().counted.CompareAndSwap(false, true) {
			countCanceled(s, 1)
		}
	}
	return len(back)
}

// noteCanceled counts w, a task its submitter gave up on, Canceled, in the
// pool and in the sub-pool of lane l (nil: none), unless it is counted.
func (p *Pool) noteCanceled(w waiter, l *lane) {
	c, ok := w.(cancelable)
	if !ok || !c.spot().counted.CompareAndSwap(false, true) {
		return
	}
	p.stats.canceled.Add(1)
	if sub := subpoolOf(l); sub != nil {
		sub.stats.canceled.Add(1)
	}
}

// countCanceled counts n tasks submitted to s as Canceled: in the pool, and
// in s if it is a sub-pool.
func countCanceled(s Submitter, n int) {
	p, sub := s.target()
	p.stats.canceled.Add(uint64(n))
	if sub != nil {
		sub.stats.canceled.Add(uint64(n))
	}
}

// noteSpot records where e, a task just accepted, waits, if its submitter
// may give up on it.
func noteSpot(e entry) {
	if c, ok := e.w.(cancelable); ok {
		at := c.spot()
		at.lane, at.seq = e.lane, e.seq
	}
}
