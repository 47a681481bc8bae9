package workerpool

// Giving up. A Call whose context is done before its fn starts, and the
// tasks of a Group or a Map whose context is done, leave the queue at once:
// they never run, and a bounded queue has room again. Their submitter first
// takes them back (takeState.giveUp), so that no worker starts them and no
// stop drops them; then it asks the loop to remove them: from the
// scheduler, or from the hand-off's outbox if one was handed out and no
// worker has taken it yet. A worker that took one first skips it.
//
// Each task given up is counted Canceled once, as soon as the pool learns
// of it: the loop counts it from its submitter's request, or as it drops
// or starts the task itself and finds it given up; a worker that skips it
// counts it; a Group that gives up a task as a worker takes it counts it
// there. So when the request is answered the task is counted, and the
// loop, which learns of every task it accepted before it finishes, has
// counted them all when it does.

// giveUp takes back the tasks in ws, submitted to s, that the pool has not
// taken, and has the loop remove them from the queue and count them
// Canceled, in the pool and in s if it is a sub-pool. It returns once they
// are counted, and reports how many it took back.
func (s *state) giveUp(to Submitter, ws []cancelable) int {
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
	if s.request(r) {
		<-r.done
		return len(back)
	}
	// The loop has finished: it counted every task it accepted. A task
	// that was to run in its submitter, under CallerRuns, it never saw:
	// that one is counted here.
	for _, w := range back {
		if w.spot().counted.CompareAndSwap(false, true) {
			countCanceled(to, 1)
		}
	}
	return len(back)
}

// noteCanceled counts w, a task its submitter gave up on, Canceled, in the
// pool and in lane l's sub-pool (nil: none), unless it is counted.
func (s *state) noteCanceled(w waiter, l *lane) {
	c, ok := w.(cancelable)
	if !ok || !c.spot().counted.CompareAndSwap(false, true) {
		return
	}
	s.stats.canceled.Add(1)
	if l != nil {
		l.stats.canceled.Add(1)
	}
}

// countCanceled counts n tasks submitted to to as Canceled: in the pool,
// and in its sub-pool if it is one.
func countCanceled(to Submitter, n int) {
	s, l := to.target()
	s.stats.canceled.Add(uint64(n))
	if l != nil {
		l.stats.canceled.Add(uint64(n))
	}
}

// noteSpot records where e, a task just accepted, waits, if its submitter
// may give up on it.
func noteSpot(e entry) {
	if c, ok := e.W.(cancelable); ok {
		at := c.spot()
		at.queue, at.level, at.seq = e.Queue, e.Level, e.Seq
	}
}
