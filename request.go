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
	subResizeRequest                        // Subpool.Resize: set its limit to n
	subStopRequest                          // Subpool.Stop: drop its tasks, wait for it to be idle
	subDrainRequest                         // Subpool.StopWait: wait for it to be idle
	cancelRequest                           // remove the cancel tasks from the queue
)

// handle carries out a request.
func (d *dispatcher) handle(r *request) {
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
	case subResizeRequest:
		// Its tasks in the hand-off buffer were handed out under the old
		// limit: they go back, to go out under the new one.
		l := r.sub.lane
		d.recall(func(x *lane) bool { return x == l })
		d.sched.setLimit(l, r.n)
		r.sub.stats.limit.Store(int64(r.n))
		d.fill()
	case subStopRequest, subDrainRequest:
		d.stopLane(r) // answers r.done once the sub-pool is idle
		return
	case cancelRequest:
		d.cancel(r.cancel)
	}
	if r.done != nil {
		close(r.done)
	}
}

// resize sets the maximum. Parked workers above it exit now, busy ones
// when their task ends (wantRetire); a larger maximum starts workers for
// waiting tasks. The hand-off buffer was filled for the old maximum, so it
// is taken back: a larger maximum may let a sub-pool's limit hold tasks
// back that it did not before.
func (d *dispatcher) resize(n int) {
	if n == d.max {
		return
	}
	d.recall(nil)
	d.max = n
	d.sched.setMax(n)
	d.p.stats.maxWorkers.Store(int64(n))
	d.updateWants() // busy surplus workers leave as their tasks end
	if !d.down {
		d.quitParked(d.workers()-n, n)
		d.clock.run(d.p, d.workers() > d.cfg().minWorkers)
	}
	d.fill()
}

// pause starts a pause, or queues it behind the current one. Once draining,
// a pause request is answered at once: Stop and StopWait end pauses.
func (d *dispatcher) pause(r *request) {
	switch {
	case d.draining || r.ctx.Err() != nil:
		close(r.done)
	case d.paused:
		d.pauses.PushBack(r)
	default:
		d.paused = true
		d.pauseEnd = r.ctx.Done()
		d.pauseAck = r.done
		d.recall(nil)
		// Paused before the pause is acknowledged: once Pause returns,
		// Status says so.
		d.setState(Paused)
		// Ask finishing workers to signal, then look: either this sees
		// the last one finish or that one sees the request.
		d.updateWants()
		d.checkPauseAck()
	}
}

// checkPauseAck answers the current pause once no task is running: every
// task handed to a worker is done. It reports whether it did.
func (d *dispatcher) checkPauseAck() bool {
	if d.pauseAck != nil && d.crew.doneTasks() == d.handed {
		d.ackPause()
		return true
	}
	return false
}

// ackPause lets the current Pause return and stops the workers' signals.
func (d *dispatcher) ackPause() {
	close(d.pauseAck)
	d.pauseAck = nil
	d.updateWants()
}

// endPause ends the current pause and starts the next queued one, if any;
// with none, the pool resumes handing out tasks.
func (d *dispatcher) endPause() {
	if d.pauseAck != nil {
		d.ackPause() // its caller waits no longer for running tasks
	}
	d.paused, d.pauseEnd = false, nil
	for d.pauses.Len() > 0 && !d.paused {
		d.pause(d.pauses.PopFront())
	}
	if !d.paused {
		d.setState(Running)
		d.fill()
	}
}

// drain stops accepting tasks and ends every pause, so that what is queued
// runs. The loop ends once the queue is empty.
func (d *dispatcher) drain() {
	if d.draining {
		return
	}
	d.draining = true
	for d.paused {
		d.endPause() // queued pauses are answered at once now
	}
	d.setState(Stopping)   // before a submitter can see ErrStopped
	d.p.closed.Store(true) // submitters check it first
	close(d.p.stopping)    // submitters waiting in a select get ErrStopped now
}

// watchDeadline makes the loop watch one more Shutdown deadline, dl (nil:
// none). One that has passed drops the queue at once. The loop checks each
// deadline itself before it hands anything out (checkDeadline); its select
// watches the first, or, once there are several, a channel that a goroutine
// closes when any of them closes, which ends then or when the pool is
// closing. While a deadline is watched, no task waits in the hand-off
// buffer (see ahead): those there come back.
func (d *dispatcher) watchDeadline(dl <-chan struct{}) {
	select {
	case <-dl:
		d.dropQueue()
		return
	default:
	}
	switch {
	case dl == nil:
		return
	case d.deadline == nil:
		d.deadline = dl
		d.recall(nil)
	default:
		merged, old, closing := make(chan struct{}), d.deadline, d.p.closing
		d.p.wg.Add(1)
		go func() {
			defer d.p.wg.Done()
			select {
			case <-old:
			case <-dl:
			case <-closing:
				return
			}
			close(merged)
		}()
		d.deadline = merged
	}
	d.deadlines = append(d.deadlines, dl)
}

// checkDeadline drops the queue if a Shutdown deadline has passed, and
// reports whether it did. The loop calls it before it hands anything out,
// so that no queued task starts once the deadline has passed, even when a
// worker is free at that very moment: a select would choose at random
// between the worker and the deadline.
func (d *dispatcher) checkDeadline() bool {
	for _, dl := range d.deadlines {
		select {
		case <-dl:
			d.deadline, d.deadlines = nil, nil
			d.dropQueue()
			return true
		default:
		}
	}
	return false
}

// dropQueue drops every waiting task, for Stop or a passed Shutdown
// deadline: those handed out that no worker has claimed, those in the
// scheduler, and any that a submitter on its way hands over later.
func (d *dispatcher) dropQueue() {
	d.dropping = true
	for _, e := range d.dropHandOffs(nil) {
		d.drop(e)
	}
	for _, e := range d.sched.dropAll() {
		d.drop(e)
	}
	d.publishWaiting()
}

// drop drops e, a task that will never run: its waiter gets ErrStopped,
// and a fire-and-forget task is kept for Stop to return.
func (d *dispatcher) drop(e entry) {
	if !d.abandon(&e, d.subpool(e.lane)) {
		return
	}
	d.dropped = append(d.dropped, e)
}

// abandon counts e, a task of sub (nil: the pool's own) that a stop
// dropped, Abandoned, and settles it: its waiter gets ErrStopped, and a
// fire-and-forget waiter becomes its func, for the stop to return. It
// reports false, and counts nothing, if its submitter gave up on it first:
// it is Canceled.
func (d *dispatcher) abandon(e *entry, sub *Subpool) bool {
	if e.w != nil {
		switch {
		case !e.w.take():
			return false
		case isFireAndForget(e.w):
			e.fn = e.w.(fireAndForget).asFunc() // returned, as a Submit's task
		default:
			e.w.finish(ErrStopped)
		}
		e.w = nil
	}
	d.p.stats.abandoned.Add(1)
	if sub != nil {
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
		dropped := d.dropHandOffs(func(x *lane) bool { return x == l })
		dropped = append(dropped, d.sched.dropLane(l)...)
		slices.SortFunc(dropped, bySeq)
		for _, e := range dropped {
			if d.abandon(&e, sub) && e.fn != nil {
				r.tasks = append(r.tasks, e.fn)
			}
		}
		d.publishWaiting()
	}
	sub.stats.state.Store(int32(Stopping))
	d.stops = append(d.stops, r)
	d.collect()
	d.settleStops()
}

// settleStops answers the sub-pools' Stop and StopWait requests whose
// sub-pools have no task waiting or out, once no give-up is under way.
func (d *dispatcher) settleStops() {
	if len(d.stops) == 0 || d.p.givingUp.Load() > 0 && !d.ended {
		return
	}
	d.stops = slices.DeleteFunc(d.stops, func(r *request) bool {
		if !d.sched.idle(r.sub.lane) {
			return false
		}
		r.sub.stats.state.Store(int32(Stopped)) // before Stop returns
		close(r.done)
		return true
	})
}

// cancel counts the tasks in ws, which their submitters took back,
// Canceled, and removes them from the scheduler, or revokes their
// hand-offs. One that is in neither is in a worker's hands, and the worker
// skips it.
func (d *dispatcher) cancel(ws []cancelable) {
	for _, w := range ws {
		at := w.spot()
		d.p.stats.canceled.Add(1)
		if at.lane == nil {
			continue // never queued: it was to run in its submitter
		}
		if sub := d.subpool(at.lane); sub != nil {
			sub.stats.canceled.Add(1)
		}
		if d.sched.cancel(at.lane, at.seq) {
			continue
		}
		if h, ok := d.out.revokeOne(at.lane, at.seq); ok {
			d.handed--
			d.sched.left(h.entry)
			d.clearBuffer()
		}
	}
	d.publishWaiting()
	d.settleStops()
	d.fill()
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
// goroutine the pool started. Then it publishes what was dropped, for
// Stop, and closes p.done.
func (d *dispatcher) windDown() {
	p := d.p
	d.down = true
	close(p.closing) // the clock and deadline mergers give up
	d.clock.stop()
	close(p.work) // the workers exit once their tasks end
	for {
		d.collect()
		d.settleStops()
		d.updateWants()
		if d.workers() == 0 && p.givingUp.Load() == 0 {
			break
		}
		select {
		case r := <-p.control:
			d.handle(r)
		case <-p.wake:
			// A worker ended a task or exited, or a give-up ended.
		}
	}
	p.wg.Wait()
	d.collect()
	// Every task has run or been dropped: a give-up that begins now has
	// nothing to take back, and the sub-pools' Stops are answered.
	d.ended = true
	d.settleStops()
	slices.SortFunc(d.dropped, bySeq)
	for _, e := range d.dropped {
		if e.fn != nil {
			p.abandoned = append(p.abandoned, e.fn)
		}
	}
	p.dropped = len(d.dropped) > 0
	d.setState(Stopped)
	close(p.done)
}
