package workerpool

import "slices"

// handle carries out a request.
func (d *dispatcher) handle(r *request) {
	switch r.kind {
	case tickRequest:
		d.reap()
	case pauseRequest:
		d.pause(r) // answers r.done when the pause takes hold
		return
	case resizeRequest:
		d.resize(r.n)
	case stopRequest:
		// Drop the queue first, so that ending a pause in drain starts
		// none of it.
		d.abandonQueue()
		d.drain()
	case drainRequest:
		// Look at the deadline first, so that a Shutdown whose ctx is
		// already done starts none of the queue.
		d.watchDeadline(r.deadline)
		d.drain()
	case subResizeRequest:
		// The task handed out ahead may be the lane's, out under the old
		// limit: it goes back, to be handed out again under the new one.
		d.requeue(d.takeBack())
		r.lane.limit = r.n
		r.lane.stats.limit.Store(int64(r.n))
		d.fill()
	case subpoolRequest:
		d.subpools = true
		if len(d.p.work) > 0 {
			d.requeue(d.takeBack()) // one task at a time from now on
		}
	case subStopRequest, subDrainRequest:
		d.stopLane(r) // answers r.done once the lane is idle
		return
	}
	if r.done != nil {
		close(r.done)
	}
}

// resize sets the maximum. Parked workers above it exit now, busy ones when
// their task ends (the loop offers them quit); a larger maximum starts
// workers for queued tasks. The hand-off buffer was filled for the old
// maximum, so it is taken back: its quits may no longer be wanted, its tasks
// may go to new workers, and, below the old maximum, must not go to a
// worker coming free that is to quit.
func (d *dispatcher) resize(n int) {
	if n != d.max {
		d.requeue(d.takeBack())
	}
	d.max = n
	d.p.stats.maxWorkers.Store(int64(n))
	d.quitParked(d.workers - d.quitting() - d.max)
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
		d.requeue(d.takeBack())
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
// task handed to a worker is done.
func (d *dispatcher) checkPauseAck() {
	if d.pauseAck != nil && d.doneTasks() == d.handed {
		d.ackPause()
	}
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
// runs. The loop in run ends once the queue is empty.
func (d *dispatcher) drain() {
	if d.draining {
		return
	}
	d.draining = true
	for d.paused {
		d.endPause() // queued pauses are answered at once now
	}
	d.setState(Stopping) // before a submitter can see ErrStopped
	close(d.p.stopping)  // submitters waiting in submit get ErrStopped now
}

// watchDeadline makes the loop watch one more Shutdown deadline, dl (nil:
// none). One that has passed drops the queue at once. The first is watched
// as it is; each later one is merged with it by a goroutine that ends when
// either closes or the pool is closing.
func (d *dispatcher) watchDeadline(dl <-chan struct{}) {
	select {
	case <-dl:
		d.abandonQueue()
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
// reports whether it did. The loop calls it before every select, and fill
// before it hands anything out, so that no queued task starts once the
// deadline has passed, even when a worker is free at that very moment: a
// select would choose at random between the worker and the deadline.
func (d *dispatcher) checkDeadline() bool {
	if d.deadline == nil {
		return false
	}
	select {
	case <-d.deadline:
		d.deadline = nil
		d.abandonQueue()
		return true
	default:
		return false
	}
}

// abandonQueue empties every lane for Stop or a passed Shutdown deadline:
// fire-and-forget tasks are kept for the first Stop or Shutdown to return,
// each lane's in order, and waiters get ErrStopped. It may run more than
// once, but nothing enters a lane once draining, so later runs find them
// empty.
func (d *dispatcher) abandonQueue() {
	back := d.cutBuffer()
	d.p.recall(back...)
	n := len(back) + d.waiting
	if n == 0 {
		return
	}
	for _, l := range slices.Clone(d.ring) {
		tasks, _ := d.drop(l) // n counted above
		d.p.abandoned = append(d.p.abandoned, tasks...)
	}
	d.p.dropped = true
	d.p.stats.abandoned.Store(d.p.stats.abandoned.Load() + uint64(n))
	d.setWaiting()
}

// stopLane carries out a sub-pool's Stop (dropping its waiting tasks) or
// StopWait, and answers r once the lane has no task waiting or out.
func (d *dispatcher) stopLane(r *request) {
	l := r.lane
	if r.kind == subStopRequest {
		// A task of l handed out ahead has not started: it is dropped
		// with the others. (One that a worker takes from the buffer
		// meanwhile has started, and runs; Stop waits for it.) The loop
		// hands out again any other lane's task taken back with it.
		d.requeue(d.takeBack())
		var n int
		r.tasks, n = d.drop(l)
		d.p.stats.abandoned.Store(d.p.stats.abandoned.Load() + uint64(n))
		d.setWaiting()
	}
	l.stats.state.Store(int32(Stopping))
	if len(l.stops) == 0 {
		d.stopping = append(d.stopping, l)
	}
	l.stops = append(l.stops, r)
	l.countEnded() // its workers counted ends without telling (see endsMatter)
	d.settleStops(l)
}

// settleStops answers the Stop and StopWait requests of lane l once it has
// no task waiting or out.
func (d *dispatcher) settleStops(l *lane) {
	if len(l.stops) == 0 || l.waiting > 0 || l.running > 0 {
		return
	}
	l.stats.state.Store(int32(Stopped)) // before Stop returns
	for _, r := range l.stops {
		close(r.done)
	}
	l.stops = nil
	d.stopping = slices.DeleteFunc(d.stopping, func(x *lane) bool { return x == l })
}

// exit tells every worker to exit once its task is done, by closing the
// channel they park on, and waits for every goroutine the pool started.
// Requests still on their way give up (they watch p.closing): a Pause or a
// Resize has nothing left to act on.
func (d *dispatcher) exit() {
	// The loop ended with the hand-off buffer empty: every quit sent has
	// been received, and its worker is on its way out.
	d.setWorkers(d.workers - d.quitting())
	d.quitsCounted = d.quits
	close(d.p.closing) // the clock, deadline mergers and late requests give up
	close(d.p.work)    // the workers run what is buffered first
	d.clock.stop()
	d.p.wg.Wait() // each exiting worker counts itself out of stats.workers
	d.dropRecalled()
	for _, l := range d.stopping { // their tasks ran or were dropped
		l.stats.state.Store(int32(Stopped)) // before Stop returns
		for _, r := range l.stops {
			close(r.done)
		}
	}
	d.setWorkers(0)
	d.setState(Stopped)
}
