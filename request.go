package workerpool

import (
	"slices"

	"github.com/dispatchkit/workerpool/internal/sched"
)

// handle carries out a request.
func (d *loop) handle(r *request) {
	d.quiet = false // the loop looks at what changed
	switch r.kind {
	case pauseRequest:
		d.pause(r) // answers r.done when the pause takes hold
		return
	case resizeRequest:
		d.resize(r.n)
	case stopRequest:
		// Drop the queue first, so that ending a pause in drain starts
		// none of it.
		d.dropQueue()
		d.drain()
	case drainRequest:
		// Look at the deadline first, so that a Shutdown whose ctx is
		// already done starts none of the queue.
		d.watchDeadline(r.deadline)
		d.drain()
	case deadlineRequest:
		d.checkDeadline()
	case subResizeRequest:
		// Its tasks in the outbox were handed out under the old limit:
		// they come back, to go out under the new one.
		q := r.lane.queue
		d.takeBack(func(e entry) bool { return e.Queue == q })
		d.sched.SetLimit(q, r.n)
		r.lane.stats.limit.Store(int64(r.n))
		d.fill() // its waiting tasks start before Resize returns
	case subStopRequest, subDrainRequest:
		d.stopLane(r) // answers r.done once the sub-pool is idle
		return
	case cancelRequest:
		d.cancel(r.cancel)
	case stopperRequest, lendRequest:
		d.lend(r)
	case reclaimRequest:
		if r.isWorker {
			d.reclaim(r.caller.id)
		}
	case rateRequest:
		d.setRate(r)
	}
	if r.done != nil {
		close(r.done)
	}
}

// lend carries out a worker's loan of its place, if the caller of r is
// one of the pool's workers (which it tells r): the worker's task calls a
// stop (stopperRequest), which it lends its place for until it exits, or
// waits on the pool (lendRequest) until it reclaims it. While lent, its
// place counts against neither the maximum nor its sub-pool's limit, so
// that the pool may start another worker in it; but at most the maximum
// of places are lent at once (the cap). Past it, a worker that waits on
// the pool waits in its place; but a stopper whose stop runs the queue
// (StopWait, Shutdown) does not wait at all (pastCap): the queue may need
// its place, and it cannot wait in it. Its key stays busy. A stopper's
// queue place is taken back when its task ends (see collect); and the loop
// does not wait for a stopper to exit.
func (d *loop) lend(r *request) {
	c := r.caller
	w := d.s.crew.find(c.id)
	if w == nil && !(c.started && c.by == d.loopID()) {
		return // not one of ours
	}
	r.isWorker = true
	if r.kind == stopperRequest {
		if d.stopperIDs[c.id] {
			return // a stopper that stops again
		}
		if r.drains && !c.leaving && d.lent >= d.max && !d.dropping {
			// Past the cap: not a stopper, a worker that goes on, for the
			// loop to wait for as for any other.
			r.pastCap = true
			return
		}
		if d.stopperIDs == nil {
			d.stopperIDs = make(map[uint64]bool)
		}
		d.stopperIDs[c.id] = true
		d.stoppers++
		if c.leaving {
			d.leavers++
		}
	} else {
		d.waiters++
	}
	if c.leaving || d.lent >= d.max {
		return // exiting, counted out already; or past the cap
	}
	l := loan{place: true}
	d.lent++
	if w != nil && w.current != nil && laneOf(w.current) != nil {
		// The worker ran a sub-pool's task when it learned its number, so
		// it knows its task, which holds a place under its limit.
		e := *w.current
		l.task = &e
		d.sched.Lend(e)
		r.lentLane = laneOf(&e)
	}
	switch {
	case r.kind == stopperRequest && l.task != nil:
		if d.lentTasks == nil {
			d.lentTasks = make(map[uint64]bool)
		}
		d.lentTasks[l.task.Seq] = true // until the task ends
	case r.kind == lendRequest:
		if d.loans == nil {
			d.loans = make(map[uint64]loan)
		}
		d.loans[c.id] = l // until the worker reclaims it
	}
	d.setMax()
	d.fill()
}

// reclaim ends the wait of the worker whose goroutine is id, and its
// loan, if it lent: it counts against the maximum and its sub-pool's limit
// again. The pool may be over either until a task ends.
func (d *loop) reclaim(id uint64) {
	d.waiters--
	l, ok := d.loans[id]
	if !ok {
		return
	}
	delete(d.loans, id)
	if l.task != nil {
		d.sched.Reclaim(*l.task)
	}
	d.lent--
	d.setMax()
}

// loopID returns the number of the loop's goroutine, which it reads the
// first time it is asked: a worker it started says so in its stack trace.
func (d *loop) loopID() uint64 {
	if d.goid == 0 {
		d.goid = goroutineID()
		d.s.loopID.Store(d.goid)
	}
	return d.goid
}

// resize sets the maximum. Surplus workers exit: parked ones at once,
// busy ones as their tasks end. The outbox was filled for the old
// maximum, so it is taken back first: a larger maximum may let a
// sub-pool's limit hold tasks back that it did not before.
func (d *loop) resize(n int) {
	if n == d.max {
		return
	}
	d.takeBack(nil)
	d.max = n
	d.s.stats.maxWorkers.Store(int64(n))
	if !d.down {
		d.lent = min(d.lent, d.max) // the cap
	}
	d.setMax()
	d.fill()
}

// pause starts a pause, or queues it behind the current one. Once closed,
// a pause request is answered at once: Stop and StopWait end pauses.
func (d *loop) pause(r *request) {
	switch {
	case d.closed || r.ctx.Err() != nil:
		close(r.done)
	case d.paused:
		d.pauses.PushBack(r)
	default:
		d.paused = true
		d.pauseEnd = r.ctx.Done()
		d.pauseAck = r.done
		d.takeBack(nil)
		// Paused before the pause is acknowledged: once Pause returns,
		// Status says so.
		d.setState(Paused)
		d.checkPauseAck()
	}
}

// checkPauseAck answers the current pause once no task is running: every
// task handed to a worker has ended.
func (d *loop) checkPauseAck() {
	if d.pauseAck != nil && d.h.Running() == 0 {
		close(d.pauseAck)
		d.pauseAck = nil
	}
}

// endPause ends the current pause and starts the next queued one, if any;
// with none, the pool resumes handing out tasks.
func (d *loop) endPause() {
	d.quiet = false
	if d.pauseAck != nil {
		close(d.pauseAck) // its caller waits no longer for running tasks
		d.pauseAck = nil
	}
	d.paused, d.pauseEnd = false, nil
	for d.pauses.Len() > 0 && !d.paused {
		d.pause(d.pauses.PopFront())
	}
	if !d.paused {
		d.setState(Running)
	}
}

// drain stops accepting tasks and ends every pause, so that what is queued
// runs. The loop ends once the queue is empty.
func (d *loop) drain() {
	if d.closed {
		return
	}
	d.closed = true
	for d.paused {
		d.endPause() // queued pauses are answered at once now
	}
	d.setState(Stopping)   // before a submitter can see ErrStopped
	d.s.closed.Store(true) // submitters check it first
	close(d.s.stopping)    // submitters waiting in a select get ErrStopped now
}

// watchDeadline makes the loop watch one more Shutdown deadline, dl (nil:
// none). One that has passed drops the queue at once. The loop looks at
// each deadline before it hands anything out (checkDeadline), and the
// Shutdown that set it sends a deadlineRequest once it passes, so that the
// loop looks then; the hand-off holds the outbox from then on, so that no
// worker takes a task of it meanwhile.
func (d *loop) watchDeadline(dl <-chan struct{}) {
	if dl == nil {
		return
	}
	select {
	case <-dl:
		d.dropQueue()
		return
	default:
	}
	d.h.Hold(dl)
	d.deadlines = append(d.deadlines, dl)
}

// checkDeadline drops the queue if a Shutdown deadline has passed. The
// loop calls it before it hands anything out, so that no queued task
// starts once the deadline has passed, even when a worker is free at that
// very moment.
func (d *loop) checkDeadline() {
	for _, dl := range d.deadlines {
		select {
		case <-dl:
			d.deadlines = nil
			d.dropQueue()
			return
		default:
		}
	}
}

// checkStranded drops the queue if no task of it can ever start: the pool
// is stopping, every task still running waits on the pool, and every
// waiting task waits for one of them to end, for its key (their places
// under the maximum and their sub-pools' limits are lent, within the cap).
// A stopper's task cannot end before the stop; another waits for a task
// that is in the queue, held back so, or for a sub-pool's running tasks,
// which wait so too: none can end while the queue waits.
func (d *loop) checkStranded() {
	if !d.closed || d.dropping || d.waitingOnPool() == 0 || !d.sched.Stuck() ||
		d.h.Len() > 0 || !d.s.onWay.empty() || d.h.Running() > d.waitingOnPool() {
		return
	}
	d.collect() // the ends of every task that ended
	if d.sched.Stuck() {
		d.dropQueue()
	}
}

// dropQueue drops every waiting task, for Stop, a passed Shutdown
// deadline or a stranded queue: those in the outbox, those in the
// scheduler, and any that a submitter on its way hands over later.
func (d *loop) dropQueue() {
	d.dropping = true
	d.takeBack(nil)
	for _, e := range d.sched.DropAll() {
		d.drop(e)
	}
	d.publishInHand()
}

// drop drops e, a task that will never run: its waiter gets ErrStopped,
// and a fire-and-forget task is kept for Stop to return.
func (d *loop) drop(e entry) {
	if !d.abandon(&e, ErrStopped) {
		return
	}
	d.dropped = append(d.dropped, e)
}

// abandon counts e, a task that a stop dropped, Abandoned, and settles it:
// its waiter gets err (ErrStopped, or a sub-pool's error that wraps it),
// and a fire-and-forget waiter becomes its func, for the stop to return.
// It reports false, and counts nothing, if its submitter gave up on it
// first: it is Canceled.
func (d *loop) abandon(e *entry, err error) bool {
	d.publishLane(e.Queue) // it left the queue, or the outbox
	l := laneOf(e)
	if e.W != nil {
		switch {
		case !e.W.take():
			d.s.noteCanceled(e.W, l)
			return false
		case isFireAndForget(e.W):
			e.Fn = e.W.(fireAndForget).asFunc() // returned, as a Submit's task
		default:
			e.W.finish(err)
		}
		e.W = nil
	}
	d.s.stats.abandoned.Add(1)
	if l != nil {
		l.stats.abandoned.Add(1)
	}
	return true
}

// stopLane carries out a sub-pool's Stop (dropping its waiting tasks,
// those in the outbox included) or StopWait, and answers r once the
// sub-pool has no task waiting or running.
func (d *loop) stopLane(r *request) {
	l, q := r.lane, r.lane.queue
	if r.kind == subStopRequest && !d.dropping {
		back := d.h.Remove(func(e entry) bool { return e.Queue == q }, d.back[:0])
		d.handed -= uint64(len(back))
		l.handed -= uint64(len(back))
		d.sched.PutBack(back)
		clear(back)
		d.back = back[:0]
		for _, e := range d.sched.DropQueue(q) {
			if d.abandon(&e, l.errStopped()) && e.Fn != nil {
				r.tasks = append(r.tasks, e.Fn)
			}
		}
		d.publishInHand()
	}
	l.stats.state.Store(int32(Stopping))
	d.stops = append(d.stops, r)
	d.collect()
	d.answerStops()
}

// answerStops answers the sub-pools' Stop and StopWait requests whose
// sub-pools have no task waiting or running, but the one that asks, if one
// of its tasks does: it lent its place while it waits. A sub-pool answered
// leaves the pool's hands: nothing of the pool refers to it any more.
func (d *loop) answerStops() {
	d.stops = slices.DeleteFunc(d.stops, func(r *request) bool {
		q := r.lane.queue
		asking := 0
		if l, ok := d.loans[r.caller.id]; ok && l.task != nil && l.task.Queue == q {
			asking = 1
		}
		if q.Waiting() > 0 || q.Running() > 0 || q.Lent() > asking {
			return false
		}
		if d.outQueue == q {
			// The outbox holds none of its tasks: let the loop keep
			// nothing of a stopped sub-pool.
			d.outQueue = nil
		}
		r.lane.stats.state.Store(int32(Stopped)) // before Stop returns
		close(r.done)
		return true
	})
}

// cancel counts the tasks in ws, which their submitters took back,
// Canceled, and removes them from the scheduler or the outbox. One that is
// in neither is in a worker's hands, and the worker skips it, or a stop
// dropped it.
func (d *loop) cancel(ws []cancelable) {
	for _, w := range ws {
		at := w.spot()
		d.s.noteCanceled(w, laneOfQueue(at.queue))
		if at.queue == nil {
			continue // never queued: it was to run in its submitter
		}
		if d.sched.Cancel(at.queue, at.level, at.seq) {
			d.publishLane(at.queue)
			continue
		}
		back := d.h.Remove(func(e entry) bool { return e.Seq == at.seq }, d.back[:0])
		for _, e := range back {
			d.handed--
			if l := laneOf(&e); l != nil {
				l.handed--
			}
			d.sched.Left(e)
			d.publishLane(e.Queue)
		}
		clear(back)
		d.back = back[:0]
	}
	d.publishInHand()
}

// windDown ends the loop's work once it is finished: every task accepted
// has been handed out, or dropped, and no submitter is on its way. It
// tells the workers to exit once the outbox is empty, answers the
// requests that come until they have (a Stop drops what the outbox still
// holds; a sub-pool's Stop returns as soon as its own tasks have ended),
// and waits for every goroutine the pool started, but the stoppers, which
// wait for it. Then it publishes what was dropped, for Stop, and closes
// done.
func (d *loop) windDown() {
	s := d.s
	d.down = true
	d.h.Close()      // the workers exit once the outbox is empty
	close(s.closing) // the reaping clock stops
	for {
		d.collect()
		d.checkDeadline()
		d.answerStops()
		if s.live.Load() <= int64(d.stoppers+d.waiters) {
			break // all have exited, and the clock, but those that wait on the pool
		}
		select {
		case r := <-s.control:
			d.handle(r)
		case <-s.wake:
			// A worker ended a task or exited.
		}
	}
	d.collect()
	d.answerStops()
	if d.h.Len() > 0 {
		// A passed deadline held the outbox, and its last workers exited
		// before the loop saw it pass.
		d.dropQueue()
	}
	slices.SortFunc(d.dropped, sched.BySeq)
	for _, e := range d.dropped {
		if e.Fn != nil {
			s.abandoned = append(s.abandoned, e.Fn)
		}
	}
	s.dropped = len(d.dropped) > 0
	// The workers that wait on the pool, if any, exit once their tasks
	// end: the last one to go closes exited, and says Stopped, or, if none
	// is left, the loop does. Set ended before done closes, so that a sub-pool's stop that
	// done releases finds the workers looking.
	s.ended.Store(true)
	close(s.done)
	if s.live.Load() == 0 {
		s.closeExited()
	}
}
