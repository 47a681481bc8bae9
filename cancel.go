package workerpool

// Giving up. A Call whose context is done before its fn starts, and the
// tasks of a Group or a Map whose context is done, leave the queue at once:
// they never run, and a bounded queue has room again. Their submitter first
// takes them back (takeState.giveUp), so that no worker starts them, and
// counts them Canceled, then asks the dispatcher to remove them: from the
// scheduler, or, if one was handed out and no worker has claimed it yet,
// by revoking its hand-off. A worker that claimed one first skips it.

// A cancelable is a waiter whose submitter may give up on it before it
// starts.
type cancelable interface {
	waiter
	giveUp() bool
	spot() *queueSpot
}

// A queueSpot is where a cancelable task waits: its lane and its seq, which
// the dispatcher records when it accepts the task and reads when the
// submitter gives up on it. Only the dispatcher touches it.
type queueSpot struct {
	lane *lane
	seq  uint64
}

// giveUp takes back the tasks in ws, submitted to s, that the pool has not
// taken, counts them Canceled, in the pool and in s if it is a sub-pool,
// and tells the dispatcher to remove them from the queue. It reports how
// many it took back. The counts come first, so that they are right even if
// the dispatcher has finished and the request is never carried out: then
// every task has run or been dropped already.
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
	countCanceled(s, len(back))
	p.request(&request{kind: cancelRequest, cancel: back})
	return len(back)
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
		*c.spot() = queueSpot{lane: e.lane, seq: e.seq}
	}
}
