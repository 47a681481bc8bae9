package workerpool

import (
	"slices"

	"github.com/gammazero/deque"
)

// A dispatcher is the state of the pool's one dispatcher goroutine, which
// owns every field here: nothing else reads or writes them, so none needs
// a lock. What others may see it publishes in Pool.stats.
//
// Its loop receives, asks the scheduler, and acts. It receives submissions
// and requests, and the signals of workers; it asks the scheduler where a
// task goes and which goes next; and it acts: it sends tasks to workers,
// starts workers, and answers requests.
//
// Workers wait for tasks on the shared channel Pool.work. A send on it goes
// straight to the worker parked longest, if one is; else into the channel's
// small buffer, the hand-off buffer. Between iterations
// the loop keeps this invariant: if a task waiting in the scheduler may
// start and the pool is not paused, then there are as many workers as the
// maximum, and the buffer is full (or, while lanes take turns, holds a
// task), so that every worker that comes free finds its next task.
type dispatcher struct {
	p     *Pool
	sched *scheduler
	max   int        // the current maximum of workers (Resize changes it)
	subs  []*Subpool // the sub-pools whose tasks the loop has seen, by lane id
	stops []*request // sub-pools' Stop and StopWait requests, waiting for their lanes to be idle
	dead  []handOff  // tasks dropped by Stop or a Shutdown deadline, for Stop to return
	got   []report   // reports taken from Pool.reports, reused
	// all lists the workers started and not yet forgotten, which the reaper does once they have exited;
	// retiredDone, retiredSkipped and retiredReceived sum what the
	// forgotten ones did.
	all                                          []*worker
	retiredDone, retiredSkipped, retiredReceived uint64

	// handed counts the tasks given to workers (less those taken back)
	// and quits the quits: together, what workers received or will. sent
	// numbers the tasks sent on Pool.work, for the cut.
	handed, quits, sent uint64
	submitted           uint64 // tasks accepted; published as stats.submitted
	unplaced            int    // tasks accepted in a row that had to wait; see letWorkersRun
	starved             bool   // fill waits for a free worker: see workerFree
	laneCuts            int    // sub-pools' Stops that cut their tasks and wait (watchLate)
	wants               uint32 // what Pool.wants holds

	// late lists the sends that requeue revoked and that have not come
	// back; limbo holds the tasks it took back meanwhile.
	late  []uint64
	limbo []entry

	// bufLane is the lane whose tasks the hand-off buffer holds, unless
	// bufMixed says it may hold tasks of several.
	bufLane  *lane
	bufMixed bool

	paused   bool
	pauseEnd <-chan struct{} // Done of the current pause's context
	pauseAck chan struct{}   // closed once no task runs in the current pause; nil once closed
	pauses   deque.Deque[*request]

	draining bool // Stop, StopWait or Shutdown was called: accept nothing more
	cut      bool // Stop or a passed deadline dropped the queue: drop what comes
	down     bool // the loop has ended and Pool.work is closed
	// deadline is closed once the first of the Shutdown contexts is done;
	// see checkDeadline.
	deadline <-chan struct{}

	clock reapClock // see reap.go
}

// run is the dispatcher goroutine. It returns, closing p.done, once the pool
// is stopped, every task it accepted has ended or been dropped, and every
// goroutine it started has exited.
func (d *dispatcher) run() {
	p := d.p
	for !d.finished() {
		if d.quiet() {
			// The common case: nothing to hand out and nothing to watch
			// but submissions, so a plain receive will do, which is
			// cheaper than a select. Requests come on p.tasks too.
			d.receive(<-p.tasks)
			continue
		}
		if d.settle() {
			continue // something changed meanwhile: look again
		}
		// Receive submissions only while the queue has room, so that Block
		// submitters wait in their send while a bounded queue is full.
		// Meanwhile requests come on p.control: a select locks every
		// channel it watches, and p.tasks is the most contended of all.
		var tasks <-chan message
		var control <-chan *request
		var reject chan<- struct{}
		switch {
		case d.receiving():
			tasks = p.tasks
		case !d.draining:
			control, reject = p.control, p.reject
		default:
			control = p.control
		}
		var work chan<- handOff
		next, ok := d.offer()
		if ok {
			work = p.work
		}
		select {
		case m := <-tasks:
			d.receive(m)
		case reject <- struct{}{}:
			// A submitter that does not wait learned that the queue is
			// full; it counts the outcome itself.
		case work <- next:
			// A worker took a task from the full buffer: the next goes in.
			d.sched.take()
			d.sentOne(next.lane, false)
			d.publishWaiting()
		case r := <-control:
			d.handle(r)
		case <-d.pauseEnd:
			d.endPause()
		case <-p.wake:
			// A worker did something the wants asked it to signal; settle
			// looks at what.
		case <-d.deadline:
			// A Shutdown's deadline passed; settle drops the queue.
		}
	}
	d.windDown()
}

// quiet reports whether the loop has nothing to do but receive: nothing
// waits to be handed out, no worker is asked to signal or to retire, and
// no request waits for anything.
func (d *dispatcher) quiet() bool {
	return d.sched.waiting == 0 && d.wants == 0 && !d.draining && !d.paused &&
		len(d.stops) == 0 && d.room() && d.workers() <= d.max
}

// finished reports whether the loop is done: the pool is stopping, no task
// waits, in a lane or in the hand-off buffer, and no submitter is on its
// way: none that passed its check of Pool.closed is still to hand over.
func (d *dispatcher) finished() bool {
	return d.draining && d.sched.waiting == 0 && len(d.p.work) == 0 && len(d.limbo) == 0 && len(d.late) == 0 && d.p.senders.Load() == 0
}

// settle brings the loop up to date before it waits: it takes the
// workers' reports, drops the queue if a Shutdown deadline has passed,
// hands out what may start, and asks the workers to signal what it waits
// for. It reports whether to look again rather than wait: a worker may have
// done something just before the wants asked it to signal it.
func (d *dispatcher) settle() bool {
	d.collect()
	if d.checkDeadline() {
		return true
	}
	if surplus := d.workers() - d.max; surplus > 0 && !d.down {
		// A surplus worker that parked as Resize took effect, before it
		// could see it was surplus, leaves now.
		d.quitParked(surplus, d.max)
	}
	d.fill()
	buffered, workers := len(d.p.work), d.workers()
	d.updateWants()
	return d.collect() || d.checkPauseAck() || len(d.p.work) < buffered || d.workers() < workers || d.finished()
}

// receiving reports whether the loop receives on p.tasks: while the queue
// has room, and once draining only from the submitters that passed their
// check of p.closed before it was set.
func (d *dispatcher) receiving() bool {
	return d.room() && (!d.draining || d.cfg().maxWaiting == 0)
}

// offer returns the task to offer on Pool.work in the select, and whether
// there is one: the next task that may start, if the hand-off buffer may
// take it. The send succeeds as soon as a worker makes room.
func (d *dispatcher) offer() (handOff, bool) {
	if !d.canFill() || d.workers() < d.max {
		return handOff{}, false // nothing to hand out, or fill starts workers
	}
	if d.workers() > d.max {
		return handOff{}, false // fill weighs each hand-out against the tasks running
	}
	e, ok := d.sched.peek()
	if !ok || !d.bufferTakes(e.lane) || e.lane.held > 0 {
		return handOff{}, false // see workerFree
	}
	return handOff{kind: runTask, entry: e, sub: d.subpool(e.lane), sent: d.sent + 1}, true
}

// receive takes m, a submission or a request, then whatever else is
// already waiting on p.tasks, without going round the loop for each.
func (d *dispatcher) receive(m message) {
	for n := 1; ; n++ {
		if m.kind == requestMessage {
			d.handle(m.req)
		} else {
			d.accept(m)
		}
		if n == 64 || !d.receiving() {
			return
		}
		select {
		case m = <-d.p.tasks:
		default:
			return
		}
	}
}

// updateWants sets p.wants from what the loop waits for: what it needs the
// workers to tell it, and whether they must drop late tasks.
func (d *dispatcher) updateWants() {
	var wants uint32
	if d.pauseAck != nil || d.starved {
		wants |= wantIdle
	}
	if len(d.p.work) > 0 && (d.draining || !d.room() || d.waitsForBuffer()) {
		// Something waits for the buffer to empty: a stop, a submitter
		// waiting for room, or a task that the buffer may not take.
		wants |= wantTaken
	}
	if d.sched.holding() || d.sched.busyKeys > 0 || len(d.stops) > 0 {
		wants |= wantEnds
	}
	if d.workers() > d.max {
		wants |= wantRetire
	}
	if d.deadline != nil || d.p.cut.Load() != nil || d.laneCuts > 0 || d.p.revoked.Load() != nil {
		wants |= watchLate
	}
	if wants != d.wants {
		d.wants = wants
		d.p.wants.Store(wants)
	}
}

// waitsForBuffer reports whether a task may start that the hand-off buffer
// may not take now: it holds another lane's task, or lanes take turns.
func (d *dispatcher) waitsForBuffer() bool {
	if !d.canFill() {
		return false
	}
	e, ok := d.sched.peek()
	return ok && !d.bufferTakes(e.lane)
}

// see returns sub's lane, and records sub as the owner of its tasks that
// the scheduler hands out.
func (d *dispatcher) see(sub *Subpool) *lane {
	l := sub.lane
	if l.id >= len(d.subs) {
		d.subs = slices.Grow(d.subs, l.id+1-len(d.subs))[:l.id+1]
	}
	d.subs[l.id] = sub
	return l
}

// subpool returns the sub-pool of lane l, or nil for the pool's own.
func (d *dispatcher) subpool(l *lane) *Subpool {
	if l.id == 0 {
		return nil
	}
	return d.subs[l.id]
}

// room reports whether one more task may wait: the lanes and the hand-off
// buffer together hold fewer than the bound.
func (d *dispatcher) room() bool {
	bound := d.cfg().maxWaiting
	return bound == 0 || d.sched.waiting+len(d.p.work)+d.outside() < bound
}

func (d *dispatcher) cfg() *config { return &d.p.cfg }

// outside counts the waiting tasks neither in the scheduler nor in the
// hand-off buffer: those in limbo, and the late ones to come back (see
// requeue).
func (d *dispatcher) outside() int { return len(d.limbo) + len(d.late) }

// workers returns how many worker goroutines are counted in: parked, busy
// or starting.
func (d *dispatcher) workers() int { return d.p.stats.workerCount() }

// publishWaiting publishes the tasks waiting in the lanes, having recorded
// the peak.
func (d *dispatcher) publishWaiting() {
	d.notePeak()
	d.p.stats.waiting.Store(int64(d.sched.waiting + len(d.limbo)))
}

// notePlaced records the peak of waiting tasks after accept placed a task,
// which may wait in the hand-off buffer.
func (d *dispatcher) notePlaced() {
	if len(d.p.work) > 0 {
		d.notePeak()
	}
}

// notePeak records the waiting tasks, those in the hand-off buffer
// included, as PeakWaiting if they are more.
func (d *dispatcher) notePeak() {
	d.p.stats.peakAtLeast(d.sched.waiting + len(d.p.work) + d.outside())
}

func (d *dispatcher) setState(s State) { d.p.stats.state.Store(int32(s)) }

// publishWorkers lets Status see the workers in d.all.
func (d *dispatcher) publishWorkers() {
	d.p.stats.reg.Store(&registry{workers: d.all, retired: d.retiredDone})
}

// doneTasks returns how many of the tasks handed out workers have done
// with: finished, or skipped because their submitters gave up on them.
func (d *dispatcher) doneTasks() uint64 {
	n := d.retiredDone + d.retiredSkipped
	for _, w := range d.all {
		n += w.phase.Load()>>1 + w.skipped.Load()
	}
	return n
}
