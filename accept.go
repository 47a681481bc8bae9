package workerpool

import "runtime"

// Accepting tasks: where the loop puts a task it receives, and how it hands
// waiting tasks out.

// accept takes a submitted task: to a worker at once if it may start and
// nothing waits (a parked worker, a new one or the hand-off buffer), else
// into the scheduler. Tasks in limbo (see requeue) wait too.
func (d *dispatcher) accept(m message) {
	d.submitted++
	d.p.stats.submitted.Store(d.submitted)
	if m.kind == taskMessage && m.sub == nil && d.sched.waiting == 0 && d.outside() == 0 && !d.paused && !d.cut {
		// The common case, kept short: a task of the pool's own queue
		// while nothing waits goes straight to a worker.
		e := entry{task: m.task, lane: &d.sched.own, seq: d.sched.nextSeq(), accepted: d.acceptedNow()}
		if m.task.w != nil {
			noteSpot(e)
		}
		if d.roomForOneMore() && d.place(e, nil) {
			d.sched.start(e)
			d.notePlaced()
			return
		}
		d.wait(e, nil)
		d.letWorkersRun()
		return
	}
	var l *lane
	if m.sub != nil {
		l = d.see(m.sub)
		m.sub.stats.submitted.Add(1)
	}
	e := d.sched.admit(m.task, l, m.key, m.kind == keyedTaskMessage, d.acceptedNow())
	if m.task.w != nil {
		noteSpot(e)
	}
	if d.cut {
		// Stop dropped the queue: a task that a submitter on its way
		// handed over since goes the same way.
		d.drop(handOff{kind: runTask, entry: e, sub: m.sub})
		return
	}
	if !d.paused && d.outside() == 0 && d.roomForOneMore() && d.sched.startsNow(e) && d.place(e, m.sub) {
		d.sched.start(e)
		d.notePlaced()
		return
	}
	d.wait(e, m.sub)
	d.letWorkersRun()
}

// acceptedNow returns the time of a task accepted now, for its timing, or
// 0 if the pool does not time its tasks.
func (d *dispatcher) acceptedNow() int64 {
	if !d.cfg().timings {
		return 0
	}
	return d.p.now()
}

// wait puts e, which may not start now, into the scheduler. If the
// hand-off buffer holds tasks of another lane, handed out while no lane but
// theirs waited, they go back to their lanes first, to take turns with
// e's.
func (d *dispatcher) wait(e entry, sub *Subpool) {
	if !e.lane.inRing && d.sched.lanesWaiting() <= 1 && len(d.p.work) > 0 && (d.bufMixed || d.bufLane != e.lane) {
		d.requeue()
	}
	d.sched.wait(e)
	d.publishWaiting()
	if sub != nil {
		sub.notePeak(len(d.p.work))
	}
}

// fill hands out waiting tasks to parked workers, new workers and the
// hand-off buffer, as many as may start.
func (d *dispatcher) fill() {
	d.starved = false
	for d.canFill() {
		e, ok := d.sched.peek()
		if !ok {
			break
		}
		if e.lane.held > 0 {
			if !d.workerFree() {
				// See workerFree: wait for a worker to come free.
				d.starved = true
				break
			}
			if d.collect() {
				continue // a key freed as its task ended: look again
			}
		}
		// Published as gone before it is sent: a worker may run it, and its
		// SubmitWait return, before the loop gets on, and then it must not
		// count as waiting. publishWaiting puts it right if it stays.
		d.p.stats.waiting.Store(int64(d.sched.waiting - 1))
		if !d.place(e, d.subpool(e.lane)) {
			break
		}
		d.sched.take()
	}
	d.publishWaiting()
}

// workerFree reports whether a task handed out now goes to a worker at
// once: one is free, or fill may start one.
//
// A task of a lane where a busy key holds tasks back goes out only then,
// never to wait in the hand-off buffer: had it waited there, the key's
// next task, accepted before it, could come free as the key's task ended
// and then start only after it, and after every task the buffer holds.
// The loop reads the workers' counts before it takes their reports, and a
// worker reports a keyed task's end before it counts it done, so a task
// ended here has freed its key in the scheduler (fill's collect).
func (d *dispatcher) workerFree() bool {
	return d.workers() < d.max || d.handed-d.doneTasks() < uint64(d.workers())
}

// canFill reports whether the loop may hand out tasks now.
func (d *dispatcher) canFill() bool {
	return !d.paused && !d.cut && len(d.late) == 0 && d.sched.waiting > 0 && d.roomForOneMore()
}

// roomForOneMore reports whether one more task may be handed out without
// more than the maximum running at once. With no more workers than the
// maximum, always: a task goes to a parked worker or the hand-off buffer,
// or starts a worker, which place does only below the maximum. After
// Resize lowered it, surplus workers are leaving; meanwhile a task may go
// to one that is parked while fewer than the maximum are handed out and
// not done. (One that parked just as Resize took effect, before it could
// see that it was surplus, leaves after that task.)
func (d *dispatcher) roomForOneMore() bool {
	return d.workers() <= d.max || d.handed-d.doneTasks() < uint64(d.max)
}

// letWorkersRun yields once 64 tasks in a row had to wait, if the pool
// runs on one P. Each task readies a worker and then the next submitter,
// and the runtime runs the goroutine readied last first, inheriting the
// time slice, so on one P the dispatcher and busy submitters can keep the
// workers waiting in the run queue indefinitely, while tasks pile up in
// the queue. Stepping out of that chain lets them run. With more Ps, idle
// ones steal the waiting workers, and a yield would only put the
// dispatcher behind every runnable submitter.
func (d *dispatcher) letWorkersRun() {
	if d.unplaced++; d.unplaced < 64 {
		return
	}
	d.unplaced = 0
	if runtime.GOMAXPROCS(0) == 1 {
		runtime.Gosched()
	}
}
