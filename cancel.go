package workerpool

// Giving up. A Call whose context is done before its fn starts, and the
// tasks of a Group or a Map whose context is done, leave the queue at once:
// they never run, and a bounded queue has room again. Their submitter first
// takes them back (takeState.giveUp), so that no worker starts them, then
// asks the dispatcher to remove them and count them Canceled: from the
// scheduler, or, if one was handed out and no worker has claimed it yet,
// by revoking its hand-off. A worker that claimed one first skips it. The
// dispatcher neither finishes nor answers a sub-pool's Stop while a
// give-up is under way (Pool.givingUp), so that when they return every
// task taken back is counted.

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
// taken, and has the dispatcher remove them from the queue and count them
// Canceled, in the pool and in s if it is a sub-pool. It returns once they
// are counted, and reports how many it took back.
func (p *Pool) giveUp(s Submitter, ws []cancelable) int {
	p.givingUp.Add(1)
	defer p.gaveUp()
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
	} else {
		// The dispatcher had finished before this give-up began: no task
		// of ws is in the queue, and nothing counts them but this.
		countCanceled(s, len(back))
	}
	return len(back)
}

// gaveUp counts a give-up out of Pool.givingUp, and tells the dispatcher
// once none is under way: it may be waiting for that.
func (p *Pool) gaveUp() {
	if p.givingUp.Add(-1) == 0 {
		p.signal()
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
		*c.spot() = queueSpot{lane: e.lane, seq: e.seq}
	}
}
