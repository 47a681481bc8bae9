package workerpool

import (
	"cmp"
	"slices"
)

// The hand-off buffer. p.work's buffer lets a worker that comes free take
// its next task while the dispatcher is busy or not even scheduled: without
// it, every queued task needs the dispatcher and the worker to meet, and
// when the tasks are long, a worker coming free waits while the dispatcher
// sits runnable behind the other workers' tasks. The buffer only ever holds
// tasks the dispatcher would have handed out next, in order; but they are
// out of its hands, so whatever must keep tasks from starting takes them
// back first:
//   - a pause, before it takes hold (takeBack);
//   - Stop and a passed Shutdown deadline, which drop them with the queue;
//     a worker that receives a task the dispatcher's take-back went past
//     drops it itself (see cutoff), so that the tasks a Stop lets start are
//     exactly those before its cut; and a worker that receives a task once
//     the deadline has passed drops it too, so that no task starts after
//     the deadline, though a later task that another worker took just
//     before it may have started (dropLate);
//   - a bounded queue's backpressure counts the buffered tasks as waiting,
//     and has the workers signal as they take them, so that Block
//     submitters get in as soon as there is room (wantTaken); so do the
//     quits on their way to workers, and a StopWait that waits for the
//     buffer to empty.

// What the dispatcher wants of the workers, in Pool.wants.
const (
	wantIdle  = 1 << iota // signal the end of every task: a Pause waits for them
	wantTaken             // signal every task or quit taken from the hand-off buffer
	wantEnds              // signal the end of every keyed or sub-pool task: a key or a sub-pool's limit holds up a task
	watchLate             // drop a task received after a Shutdown deadline or past the cut
)

// A cutoff is where Stop, or a passed Shutdown deadline, cut the tasks sent
// on p.work: the dispatcher publishes it (Pool.cut) and sets watchLate
// before it takes the hand-off buffer back, then sets seq to the first task
// it took back and closes done. A worker that sees watchLate after
// receiving a task waits for done and drops the task if its seq is at or
// past the cut: the workers took it, concurrently, after the dispatcher
// took an earlier one. A worker that received its task before watchLate
// was set received it before the take-back began, so its seq is below the
// cut. Either way, of the tasks Stop cuts, those that start are exactly
// those sent before the cut, and the dropped ones all come after them. (A
// Shutdown deadline also drops by the clock; see late.)
type cutoff struct {
	seq  uint64 // written before done is closed
	done chan struct{}
}

// handOffBuffer is the capacity of the hand-off buffer (see Pool.work): how
// many waiting tasks workers can take without waiting for the dispatcher.
// It is bounded by WithMaxWaiting, as buffered tasks wait too.
const handOffBuffer = 64

// updateWants sets p.wants from the dispatcher's state: what it needs the
// workers to tell it, and whether they must check a Shutdown deadline. The
// loop calls it before it looks at room, so that a worker taking a task
// from the buffer either is seen by that look or sees wantTaken and signals.
func (d *dispatcher) updateWants() {
	var wants uint32
	if d.pauseAck != nil {
		wants |= wantIdle
	}
	if d.quitting() > 0 || len(d.p.work) > 0 && (d.draining || !d.room() || !d.deep()) {
		wants |= wantTaken
	}
	if d.linesOut > 0 || d.endsMatter() {
		wants |= wantEnds
	}
	if d.deadline != nil || d.p.cut.Load() != nil {
		wants |= watchLate
	}
	if wants != d.wants {
		d.wants = wants
		d.p.wants.Store(wants)
	}
}

// takeBack empties the hand-off buffer and returns the tasks that were in
// it, in order, so that none starts before the dispatcher hands it out
// again or drops it. A worker may take one at the same time; it then runs,
// as if handed out just before. A quit taken back counts for nothing: the
// loop offers quits again while there are more workers than the maximum.
func (d *dispatcher) takeBack() []job {
	var back []job
	for len(d.p.work) > 0 {
		select {
		case t := <-d.p.work:
			if t.valid() {
				back = append(back, t)
				d.handed--
			} else {
				d.quits--
				d.p.stats.quitsSent.Store(d.quits)
			}
		default:
		}
	}
	d.bufLane, d.bufMixed = nil, false
	return back
}

// cutBuffer takes the hand-off buffer back for good, for Stop or a passed
// Shutdown deadline, and returns its tasks: nothing is offered on p.work
// after it but quits. See cutoff.
func (d *dispatcher) cutBuffer() []job {
	if d.p.cut.Load() != nil {
		return d.takeBack() // cut once already: the buffer holds no task
	}
	cut := &cutoff{seq: ^uint64(0), done: make(chan struct{})}
	d.p.cut.Store(cut)
	d.updateWants() // watchLate, before the first receive
	back := d.takeBack()
	if len(back) > 0 {
		cut.seq = back[0].seq
	}
	close(cut.done)
	return back
}

// recall records tasks dropped from the hand-off buffer, by the dispatcher
// (taken back for Stop or a passed Shutdown deadline) or by a worker (see
// dropLate), and tells their waiters.
func (p *Pool) recall(tasks ...job) {
	p.recalled.mu.Lock()
	p.recalled.jobs = append(p.recalled.jobs, tasks...)
	p.recalled.mu.Unlock()
	for _, t := range tasks {
		if t.lane != nil {
			t.lane.stats.abandoned.Add(1)
		}
		if t.w != nil {
			t.w.finish(ErrStopped)
		}
	}
}

// dropRecalled puts the recalled tasks at the front of the dropped ones, in
// the order they were sent: they left the queue before the tasks dropped
// from it, and the dispatcher and the workers took them from the buffer
// concurrently. It is called once every worker has exited.
func (d *dispatcher) dropRecalled() {
	recalled := d.p.recalled.jobs
	if len(recalled) == 0 {
		return
	}
	slices.SortFunc(recalled, func(a, b job) int { return cmp.Compare(a.seq, b.seq) })
	var tasks []func()
	for _, t := range recalled {
		if t.fn != nil {
			tasks = append(tasks, t.fn)
		}
	}
	d.p.abandoned = append(tasks, d.p.abandoned...)
	d.p.dropped = true
	d.p.recalled.jobs = nil
}
