package workerpool

import (
	"context"
	"slices"
	"time"
)

// A request asks the dispatcher to do something other than take a task.
// It travels on Pool.tasks, in a message, or on Pool.control; done, if not
// nil, is closed once the request has taken effect.
type request struct {
	kind     requestKind
	n        int             // resize, subResize: the new maximum or limit
	ctx      context.Context // pause: pause until it is done
	deadline <-chan struct{} // drain: a Shutdown's ctx.Done(), or nil
	sub      *Subpool        // sub*: the sub-pool
	cancel   []cancelable    // cancel: the tasks their submitters took back
	tasks    []func()        // subStop: the tasks it dropped; written before done closes
	worker   bool            // subStop, subDrain: called by one of the pool's workers
	leaving  bool            // stopper, or worker: the worker is leaving (see leaving)
	done     chan struct{}
}

// A requestKind says what a request asks for.
type requestKind uint8

const (
	tickRequest      requestKind = iota + 1 // the reaping clock ticked
	pauseRequest                            // Pause: hold the queue until ctx is done
	resizeRequest                           // Resize: set the maximum to n
	stopRequest                             // Stop: drop the queue, then drain
	drainRequest                            // StopWait or Shutdown: run the queue, accept nothing more
	deadlineRequest                         // a Shutdown's ctx is done: look at the deadlines
	subResizeRequest                        // Subpool.Resize: set its limit to n
	subStopRequest                          // Subpool.Stop: drop its tasks, wait for it to be idle
	subDrainRequest                         // Subpool.StopWait: wait for it to be idle
	cancelRequest                           // remove the cancel tasks from the queue
	stopperRequest                          // a worker calls Stop, StopWait or Shutdown: wait not for it
)

// handle carries out a request.
func (d *dispatcher) handle(r *request) {
	d.quiet = false // the loop looks at what changed
	switch r.kind {
	case tickRequest:
		if !d.down {
			d.reap()
		}
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
		// Its tasks in the hand-off buffer were handed out under the old
		// limit: they go back, to go out under the new one.
		l := r.sub.lane
		d.recallLane(l)
		d.sched.setLimit(l, r.n)
		r.sub.stats.limit.Store(int64(r.n))
		d.fill() // its waiting tasks start before Resize returns
	case subStopRequest, subDrainRequest:
		d.stopLane(r) // answers r.done once the sub-pool is idle
		return
	case cancelRequest:
		d.cancel(r.cancel)
	case stopperRequest:
		d.stoppers++
		if r.leaving {
			d.leavers++ // counted out already
			break
		}
		// Its place is free: what waits in the buffer for a worker to
		// come free comes back, to go to a worker started in its place.
		d.recall(0)
		d.setMax(d.max)
	}
	if r.done != nil {
		close(r.done)
	}
}

// resize sets the maximum. Surplus workers exit: parked ones at once,
// busy ones as their tasks end, each taking one of the retirements the
// loop sends ahead of any task. The buffer was filled for the old
// maximum, so it is taken back first: a larger maximum may let a
// sub-pool's limit hold tasks back that it did not before.
func (d *dispatcher) resize(n int) {
	if n == d.max {
		return
	}
	d.recall(0)
	d.setMax(n)
	d.p.stats.maxWorkers.Store(int64(n))
	if !d.down {
		d.quitParked(d.working()-n, n+d.stoppers-d.leavers) // idle ones at once
		d.owedRetires = max(d.working()-n, 0)
		d.sendRetirements()
		d.clock.run(d.p, d.workers() > d.cfg().minWorkers)
	}
	d.fill()
}

// pause starts a pause, or queues it behind the current one. Once closed,
// a pause request is answered at once: Stop and StopWait end pauses.
func (d *dispatcher) pause(r *request) {
	switch {
	case d.closed || r.ctx.Err() != nil:
		close(r.done)
	case d.paused:
		d.pauses.PushBack(r)
	default:
		d.paused = true
		d.pauseEnd = r.ctx.Done()
		d.pauseAck = r.done
		d.recall(0)
		// Paused before the pause is acknowledged: once Pause returns,
		// Status says so.
		d.setState(Paused)
		d.checkPauseAck()
	}
}

// checkPauseAck answers the current pause once no task is running: every
// task handed to a worker is done. It reports whether it did.
func (d *dispatcher) checkPauseAck() bool {
	if d.pauseAck != nil && d.crew.doneTasks() == d.handed {
		close(d.pauseAck)
		d.pauseAck = nil
		return true
	}
	return false
}

// endPause ends the current pause and starts the next queued one, if any;
// with none, the pool resumes handing out tasks.
func (d *dispatcher) endPause() {
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
func (d *dispatcher) drain() {
	if d.closed {
		return
	}
	d.closed = true
	for d.paused {
		d.endPause() // queued pauses are answered at once now
	}
	d.setState(Stopping)   // before a submitter can see ErrStopped
	d.p.closed.Store(true) // submitters check it first
	close(d.p.stopping)    // submitters waiting in a select get ErrStopped now
}

// watchDeadline makes the loop watch one more Shutdown deadline, dl (nil:
// none). One that has passed drops the queue at once. The loop looks at
// each deadline before it hands anything out (checkDeadline), and the
// Shutdown that set it sends a deadlineRequest once it passes, so that the
// loop looks then. While a deadline is watched, no task waits in the
// hand-off buffer (see mayBuffer): those there come back.
func (d *dispatcher) watchDeadline(dl <-chan struct{}) {
	if dl == nil {
		return
	}
	select {
	case <-dl:
		d.dropQueue()
		return
	default:
	}
	if d.deadlines == nil {
		d.recall(0)
	}
	d.deadlines = append(d.deadlines, dl)
}

// checkDeadline drops the queue if a Shutdown deadline has passed, and
// reports whether it did. The loop calls it before it hands anything out,
// so that no queued task starts once the deadline has passed, even when a
// worker is free at that very moment.
func (d *dispatcher) checkDeadline() bool {
	for _, dl := range d.deadlines {
		select {
		case <-dl:
			d.deadlines = nil
			d.dropQueue()
			return true
		default:
		}
	}
	return false
}

// checkStranded drops the queue if no task of it can ever start: the pool
// is stopping, every task still running is a stopper's, which waits for
// the stop, or waits in a sub-pool's stop, which waits for that sub-pool's
// running tasks (the same kinds, or it would not wait: its waiting ones
// are held back by those), and every waiting task waits for one of them
// to end, for its sub-pool's place or its key. It reports whether it did.
// Only the workers' records say that no other task runs, and that none
// has ended unreported (see taskDone), so it reads them, but only in that
// rare state: some stopper's task runs, and no waiting task may start.
func (d *dispatcher) checkStranded() bool {
	if !d.closed || d.dropping || d.stoppers == d.leavers || !d.sched.stuck() ||
		!d.out.resolved() || !d.p.onWay.empty() {
		return false
	}
	// A stopper, or a worker in a sub-pool's stop, is busy (in its task)
	// or occupied (in a hook of it), unless it is leaving: if no other
	// worker is either, no other task runs, and none has ended
	// unreported. Else the worker signals when it is free.
	done, occupied := d.crew.tasksAndOccupied()
	if d.handed-done+uint64(occupied) > uint64(d.stoppers-d.leavers+d.subWaiters-d.subLeavers) {
		return false
	}
	d.collect() // the reports of every end counted in done
	if !d.sched.stuck() {
		return false
	}
	d.dropQueue()
	return true
}

// dropQueue drops every waiting task, for Stop, a passed Shutdown
// deadline or a stranded queue: those handed out that no worker has
// claimed, those in the scheduler, and any that a submitter on its way
// hands over later.
func (d *dispatcher) dropQueue() {
	d.dropping = true
	for _, e := range d.dropHandOffs(nil) {
		d.drop(e)
	}
	for _, e := range d.sched.dropAll() {
		d.drop(e)
	}
	d.publishInHand()
}

// drop drops e, a task that will never run: its waiter gets ErrStopped,
// and a fire-and-forget task is kept for Stop to return.
func (d *dispatcher) drop(e entry) {
	if !d.abandon(&e) {
		return
	}
	d.dropped = append(d.dropped, e)
}

// abandon counts e, a task that a stop dropped, Abandoned, and settles it:
// its waiter gets ErrStopped, and a fire-and-forget waiter becomes its
// func, for the stop to return. It reports false, and counts nothing, if
// its submitter gave up on it first: it is Canceled.
func (d *dispatcher) abandon(e *entry) bool {
	d.publishLane(e.lane) // it left the lane, or its hand-off was taken back
	if e.w != nil {
		switch {
		case !e.w.take():
			d.p.noteCanceled(e.w, e.lane)
			return false
		case isFireAndForget(e.w):
			e.fn = e.w.(fireAndForget).asFunc() // returned, as a Submit's task
		default:
			e.w.finish(ErrStopped)
		}
		e.w = nil
	}
	d.p.stats.abandoned.Add(1)
	if sub := subpoolOf(e.lane); sub != nil {
		sub.stats.abandoned.Add(1)
	}
	return true
}

// stopLane carries out a sub-pool's Stop (dropping its waiting tasks,
// those in the hand-off buffer included) or StopWait, and answers r once
// the sub-pool has no task waiting or out.
func (d *dispatcher) stopLane(r *request) {
	sub, l := r.sub, r.sub.lane
	if r.kind == subStopRequest && !d.dropping {
		dropped := d.dropHandOffs(func(s *send) bool { return s.lane == l })
		dropped = append(dropped, d.sched.dropLane(l)...)
		slices.SortFunc(dropped, bySeq)
		for _, e := range dropped {
			if d.abandon(&e) && e.fn != nil {
				r.tasks = append(r.tasks, e.fn)
			}
		}
		d.publishInHand()
	}
	sub.stats.state.Store(int32(Stopping))
	d.stops = append(d.stops, r)
	if r.worker {
		d.subWaiters++
		if r.leaving {
			d.subLeavers++
		}
	}
	d.collect()
	d.answerStops()
}

// answerStops answers the sub-pools' Stop and StopWait requests whose
// sub-pools have no task waiting or out, and reports whether it answered
// any. A sub-pool answered leaves the pool's hands: nothing of the pool
// refers to it any more.
func (d *dispatcher) answerStops() bool {
	n := len(d.stops)
	d.stops = slices.DeleteFunc(d.stops, func(r *request) bool {
		if !d.sched.idle(r.sub.lane) {
			return false
		}
		r.sub.stats.state.Store(int32(Stopped)) // before Stop returns
		if r.worker {
			d.subWaiters--
			if r.leaving {
				d.subLeavers--
			}
		}
		close(r.done)
		return true
	})
	return len(d.stops) < n
}

// cancel counts the tasks in ws, which their submitters took back,
// Canceled, and removes them from the scheduler, or revokes their
// hand-offs. One that is in neither is in a worker's hands, and the worker
// skips it, or a stop dropped it.
func (d *dispatcher) cancel(ws []cancelable) {
	for _, w := range ws {
		at := w.spot()
		d.p.noteCanceled(w, at.lane)
		if at.lane == nil {
			continue // never queued: it was to run in its submitter
		}
		if d.sched.cancel(at.lane, at.seq) {
			d.publishLane(at.lane)
			continue
		}
		if e, turn, ok := d.out.revokeOne(at.lane, at.seq); ok {
			d.handed--
			e.lane.handed--
			d.sched.left(e, turn)
			d.publishLane(e.lane)
			d.clearBuffer()
		}
	}
	d.publishInHand()
}

// publishLane publishes what a sub-pool's lane holds, for its Status: the
// tasks waiting in it, and those handed out of it, less those taken back.
func (d *dispatcher) publishLane(l *lane) {
	if sub := subpoolOf(l); sub != nil {
		sub.stats.inHand.Store(uint64(l.waiting) + l.handed)
	}
}

// reap advances the reaping clock and tells the workers parked for at least
// an idle timeout to exit, never going below MinWorkers, less the stale
// ones: handed a task or a quit they have not yet received (see reap.go).
func (d *dispatcher) reap() {
	now := time.Now()
	tick := d.p.tick.Load() + 1
	d.clock.handled[tick%uint64(len(d.clock.handled))] = now
	d.p.tick.Store(tick)
	idle, received, forgot := d.crew.survey(&d.clock, tick, now)
	if forgot {
		d.publishWorkers()
	}
	d.quitParked(idle-int(d.handed+d.quits-received), d.cfg().minWorkers)
	d.clock.run(d.p, d.workers() > d.cfg().minWorkers)
}

// windDown ends the dispatcher's work once the loop is finished: every
// task accepted has been handed out and claimed, or dropped, and no
// submitter is on its way. It tells the workers to exit once their tasks
// end, answers the requests that come until they have (a sub-pool's Stop
// returns as soon as its own tasks have ended), and waits for every
// goroutine the pool started, but the stoppers, which wait for it. Then it
// publishes what was dropped, for Stop, and closes p.done.
func (d *dispatcher) windDown() {
	p := d.p
	d.down = true
	close(p.closing) // the clock gives up
	d.clock.stop()
	close(p.work) // the workers exit once their tasks end
	for {
		d.collect()
		d.answerStops()
		if p.live.Load() <= int64(d.stoppers+d.subWaiters) {
			// All have exited, and the clock, but the stoppers and the
			// workers whose sub-pool's stop waits for a stopper's task
			// (it waits on once the pool has stopped: see Subpool.stop).
			break
		}
		select {
		case r := <-p.control:
			d.handle(r)
		case <-p.wake:
			// A worker ended a task or exited.
		}
	}
	d.collect()
	d.answerStops()
	slices.SortFunc(d.dropped, bySeq)
	for _, e := range d.dropped {
		if e.fn != nil {
			p.abandoned = append(p.abandoned, e.fn)
		}
	}
	p.dropped = len(d.dropped) > 0
	d.setState(Stopped)
	// The stoppers, if any, exit once their calls return: the last one
	// to go closes exited, or, if none is left, the dispatcher does. Set
	// ended before done closes, so that a sub-pool's stop that done
	// releases finds the workers looking (see Subpool.waitLastEnded).
	p.ended.Store(true)
	close(p.done)
	if p.live.Load() == 0 {
		p.closeExited()
	}
}
