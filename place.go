package workerpool

import "runtime"

// Placement: where a submitted task goes, and the counts of what the
// dispatcher sends on p.work.

// accept places a submitted task, keeping the invariant on the struct: if
// nothing waits and the task may start, to a parked worker, else to a new
// worker, else to the hand-off buffer; else into its lane.
func (d *dispatcher) accept(t job) {
	d.submitted++
	d.p.stats.submitted.Store(d.submitted)
	if t.lane == nil && t.line == nil {
		// The pool's own unkeyed task: the common case, kept short.
		if d.waiting != 0 || d.paused || d.workers > d.max || !d.place(&d.own, t) {
			d.wait(&d.own, t)
			d.letWorkersRun()
		} else {
			d.notePlaced()
		}
		return
	}
	l := d.laneOf(t)
	if l.sub != nil {
		l.submitted++
		l.stats.submitted.Store(l.submitted)
		defer func() { l.notePeak(len(d.p.work) - d.quitting()) }()
	}
	if t.line == keyed {
		// Its key's line; the task waits in it while the key is busy.
		t.line = l.line(t.key, &d.freeLines)
		if t.line.out || t.line.tasks.Len() > 0 {
			d.wait(l, t)
			return
		}
	}
	if l.sub != nil && l.running >= l.limit {
		l.countEnded() // its workers count ends without telling (see endsMatter)
	}
	if d.waiting == 0 && !d.paused && d.workers <= d.max && l.underLimit() {
		// Counted out before it is sent, and taken back if not sent.
		d.out(l, t.line)
		if d.place(l, t) {
			d.notePlaced()
			return
		}
		d.in(l, t.line)
	}
	d.wait(l, t)
	d.letWorkersRun()
}

// place hands t, a task of lane l, to a parked worker, else to a new worker
// if there are fewer than max, else to the hand-off buffer, and reports
// whether it did. The buffer takes t only if it is empty, or holds tasks of
// l alone while l is the only lane with waiting tasks (see deep): a task
// that finds tasks of another lane in the buffer must wait for its turn.
func (d *dispatcher) place(l *lane, t job) bool {
	t.seq = d.sent + 1
	if t.lane == &d.own {
		t.lane = nil
	}
	if len(d.p.work) == 0 {
		// A worker may be parked: a send goes to it if one is. If none
		// is, the task lands in the buffer, alone; then take it back for
		// a new worker, unless a worker came free and took it meanwhile.
		select {
		case d.p.work <- t:
			if len(d.p.work) > 0 && d.workers < d.max {
				select {
				case t = <-d.p.work:
					d.start(t)
					return true
				default:
				}
			}
			d.sentOne(l, true)
			return true
		default:
		}
	}
	if d.workers < d.max {
		d.start(t)
		return true
	}
	if !d.deep() || d.bufMixed || d.bufLane != l {
		return false
	}
	select {
	case d.p.work <- t:
		d.sentOne(l, false)
		return true
	default:
		return false
	}
}

// letWorkersRun yields once 64 tasks in a row went to the queue, if the pool
// runs on one P. Each task readies a worker and then the next submitter,
// and the runtime runs the goroutine readied last first, inheriting the
// time slice, so on one P the dispatcher and busy submitters can keep the
// workers waiting in the run queue indefinitely, while tasks pile up in the
// queue. Stepping out of that chain lets them run. With more Ps, idle ones
// steal the waiting workers, and a yield would only put the dispatcher
// behind every runnable submitter.
func (d *dispatcher) letWorkersRun() {
	if d.unplaced++; d.unplaced < 64 {
		return
	}
	d.unplaced = 0
	if runtime.GOMAXPROCS(0) == 1 {
		runtime.Gosched()
	}
}

// fill hands waiting tasks to parked workers and the hand-off buffer, and to
// new workers up to max, as they may start. It restores the invariant after
// a resume, a resize or the end of a keyed or sub-pool task.
func (d *dispatcher) fill() {
	if d.checkDeadline() {
		return
	}
	for !d.paused && d.workers <= d.max {
		t, ok := d.offer()
		if !ok || !d.place(d.offered, t) {
			return
		}
		d.commit()
	}
}

// sentOne counts a task of lane l sent on p.work, and notes whether the
// hand-off buffer may hold tasks of other lanes than l: alone says it held
// nothing before.
func (d *dispatcher) sentOne(l *lane, alone bool) {
	d.sent++
	d.handed++
	d.unplaced = 0
	switch {
	case alone:
		d.bufLane, d.bufMixed = l, false
	case d.bufLane != l:
		d.bufMixed = true
	}
}

// notePlaced records the peak of waiting tasks after accept placed one,
// which may wait in the hand-off buffer. (A task handed out from a lane is
// counted by commit, once it has left the lane.)
func (d *dispatcher) notePlaced() {
	if len(d.p.work) > 0 {
		d.notePeak()
	}
}

// quitSent counts a zero job sent to tell a worker to exit. If it went
// straight to a worker (direct), the worker is counted out at once. If it
// is in the hand-off buffer, its worker counts until the dispatcher sees
// that a worker received it (seeQuits): a worker still busy must keep its
// place under the maximum.
func (d *dispatcher) quitSent(direct bool) {
	d.quits++
	d.p.stats.quitsSent.Store(d.quits)
	if direct {
		d.quitsCounted++
		d.setWorkers(d.workers - 1)
	}
}

// quitting returns how many quits are in the buffer, their workers not yet
// counted out.
func (d *dispatcher) quitting() int { return int(d.quits - d.quitsCounted) }

// seeQuits counts out the workers of buffered quits that have been
// received, and reports whether there were any. Workers count every quit
// they receive; those beyond what the dispatcher has counted out are
// buffered ones. (A direct quit is counted out before its worker counts it
// received.)
func (d *dispatcher) seeQuits() bool {
	if d.quits == d.quitsCounted {
		return false
	}
	got := d.p.stats.quitsReceived.Load()
	if got <= d.quitsCounted {
		return false
	}
	d.setWorkers(d.workers - int(got-d.quitsCounted))
	d.quitsCounted = got
	return true
}

// start starts a worker goroutine whose first task is t; with the zero job
// the worker starts parked.
func (d *dispatcher) start(t job) {
	w := new(worker)
	if t.valid() {
		d.handed++
		w.phase.Store(1) // busy with t
		if t.lane != nil {
			t.lane.stats.started.Add(1) // Busy in the sub-pool's Status at once, too
		}
	} else {
		w.since.Store(d.p.tick.Load() + 1)
	}
	// Count it before Status can see it busy: Busy <= Workers.
	d.setWorkers(d.workers + 1)
	d.all = append(d.all, w)
	d.publishWorkers()
	d.p.startWorker(w, t)
}

// publishWorkers lets Status see the workers in d.all.
func (d *dispatcher) publishWorkers() {
	d.p.stats.reg.Store(&registry{workers: d.all, retired: d.retired.done})
}

// doneTasks returns how many tasks workers have finished.
func (d *dispatcher) doneTasks() uint64 {
	n := d.retired.done
	for _, w := range d.all {
		n += w.phase.Load() >> 1
	}
	return n
}
