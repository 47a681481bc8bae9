package workerpool

import (
	"context"
	"slices"
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
	gone     []entry         // subStop: the dropped tasks to return, until done closes
	cut      bool            // subStop: it cut the sub-pool's tasks in the hand-off buffer
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
		// A task of the sub-pool in the hand-off buffer was handed out
		// under the old limit: it goes back, to go out under the new one.
		d.requeue()
		d.sched.setLimit(r.sub.lane, r.n)
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
	d.requeue()
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
		d.requeue()
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
	if d.pauseAck != nil && d.doneTasks() == d.handed {
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
// none). One that has passed drops the queue at once. The first is watched
// as it is; each later one is merged with it by a goroutine that ends when
// either closes or the pool is closing.
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
	// Workers drop what they take from the hand-off buffer once it passes.
	deadline := d.deadline
	d.p.deadline.Store(&deadline)
	d.updateWants()
}

// checkDeadline drops the queue if a Shutdown deadline has passed, and
// reports whether it did. The loop calls it before it hands anything out,
// so that no queued task starts once the deadline has passed, even when a
// worker is free at that very moment: a select would choose at random
// between the worker and the deadline.
func (d *dispatcher) checkDeadline() bool {
	if d.deadline == nil {
		return false
	}
	select {
	case <-d.deadline:
		d.deadline = nil
		d.dropQueue()
		return true
	default:
		return false
	}
}

// dropQueue drops every waiting task, for Stop or a passed Shutdown
// deadline: those in the hand-off buffer and those in the scheduler, and
// any that a submitter on its way hands over later.
func (d *dispatcher) dropQueue() {
	d.cut = true
	for _, h := range d.cutBuffer() {
		d.sched.ended(h.entry) // it was out
		d.drop(h)
	}
	for _, e := range d.limbo {
		d.sched.ended(e) // it was out
		d.drop(handOff{kind: runTask, entry: e, sub: d.subpool(e.lane)})
	}
	clear(d.limbo)
	d.limbo = d.limbo[:0]
	for _, e := range d.sched.dropAll() {
		d.drop(handOff{kind: runTask, entry: e, sub: d.subpool(e.lane)})
	}
	d.publishWaiting()
}

// drop drops h, a task that will never run: its waiter gets ErrStopped,
// and a fire-and-forget task is kept for Stop to return.
func (d *dispatcher) drop(h handOff) {
	if h.w != nil {
		switch {
		case !h.w.claim():
			return // its submitter gave up on it first: canceled, not dropped
		case isFireAndForget(h.w):
			h.fn = h.w.(fireAndForget).asFunc() // returned, as a Submit's task
		default:
			h.w.finish(ErrStopped)
		}
		h.w = nil
	}
	d.p.stats.abandoned.Add(1)
	if h.sub != nil {
		h.sub.stats.abandoned.Add(1)
	}
	d.dead = append(d.dead, h)
}

// stopLane carries out a sub-pool's Stop (dropping its waiting tasks) or
// StopWait, and answers r once the sub-pool has no task waiting or out.
func (d *dispatcher) stopLane(r *request) {
	sub, l := r.sub, r.sub.lane
	if r.kind == subStopRequest && !d.cut {
		// Its tasks in the hand-off buffer have not started: they are
		// dropped with the others, and so are those that workers take
		// meanwhile past the cut, as for the pool's Stop (cutoff). The
		// other lanes' tasks taken back with them are handed out again.
		cut := &cutoff{sent: ^uint64(0), done: make(chan struct{})}
		sub.cut.Store(cut)
		r.cut = true
		d.laneCuts++
		d.updateWants() // watchLate, before the first receive
		var gone []entry
		for _, h := range d.requeueExcept(l) {
			cut.sent = min(cut.sent, h.sent)
			d.sched.ended(h.entry)
			gone = append(gone, h.entry)
		}
		close(cut.done)
		// Its tasks in limbo (see requeue) have not started either.
		d.limbo = slices.DeleteFunc(d.limbo, func(e entry) bool {
			if e.lane != l {
				return false
			}
			d.sched.ended(e)
			gone = append(gone, e)
			return true
		})
		for _, e := range append(gone, d.sched.dropLane(l)...) {
			d.dropFrom(r, e)
		}
		d.publishWaiting()
	}
	sub.stats.state.Store(int32(Stopping))
	d.stops = append(d.stops, r)
	d.collect()
	d.settleStops()
}

// dropFrom drops e, a task of the sub-pool that r stops: its waiter gets
// ErrStopped, and a fire-and-forget task is kept for Stop to return.
func (d *dispatcher) dropFrom(r *request, e entry) {
	switch {
	case e.w == nil:
	case !e.w.claim():
		return // its submitter gave up on it first: canceled
	case isFireAndForget(e.w):
		e.fn, e.w = e.w.(fireAndForget).asFunc(), nil
	default:
		e.w.finish(ErrStopped)
		e.w = nil
	}
	if e.fn != nil {
		r.gone = append(r.gone, e)
	}
	d.p.stats.abandoned.Add(1)
	r.sub.stats.abandoned.Add(1)
}

// dropLate drops h, a task of a sub-pool that a worker took past the cut
// of the sub-pool's Stop, and reports whether it did: not if the pool's
// own Stop cut it, which drops it with the pool's queue.
func (d *dispatcher) dropLate(h handOff) bool {
	r := d.cutting(h.sub)
	if d.cut || r == nil {
		return false
	}
	d.dropFrom(r, h.entry)
	return true
}

// cutting returns the Stop request that is cutting sub's tasks, or nil.
func (d *dispatcher) cutting(sub *Subpool) *request {
	if sub == nil {
		return nil
	}
	for _, r := range d.stops {
		if r.sub == sub && r.cut {
			return r
		}
	}
	return nil
}

// settleStops answers the sub-pools' Stop and StopWait requests whose
// sub-pools have no task waiting or out.
func (d *dispatcher) settleStops() {
	d.stops = slices.DeleteFunc(d.stops, func(r *request) bool {
		if !d.sched.idle(r.sub.lane) {
			return false
		}
		if r.cut {
			d.laneCuts--
			slices.SortFunc(r.gone, bySeq)
			for _, e := range r.gone {
				r.tasks = append(r.tasks, e.fn)
			}
			r.gone = nil
		}
		r.sub.stats.state.Store(int32(Stopped)) // before Stop returns
		close(r.done)
		return true
	})
}

// windDown ends the dispatcher's work once the loop is finished: every
// task accepted has been handed out or dropped, and no submitter is on its
// way. It tells the workers to exit once their tasks end, answers the
// requests that come until they have (a sub-pool's Stop returns as soon as
// its own tasks have ended), and waits for every goroutine the pool
// started. Then it publishes what was dropped, for Stop, and closes p.done.
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
		if d.workers() == 0 {
			break
		}
		select {
		case r := <-p.control:
			d.handle(r)
		case <-p.wake:
			// A worker ended a task or exited.
		}
	}
	p.wg.Wait()
	d.collect()
	d.settleStops()
	slices.SortFunc(d.dead, func(a, b handOff) int { return bySeq(a.entry, b.entry) })
	for _, h := range d.dead {
		if h.fn != nil {
			p.abandoned = append(p.abandoned, h.fn)
		}
	}
	p.dropped = len(d.dead) > 0
	d.setState(Stopped)
	close(p.done)
}
