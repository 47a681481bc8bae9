package workerpool

import (
	"context"
	"runtime"

	"github.com/gammazero/deque"
)

// A dispatcher is the state of the pool's one dispatcher goroutine. It owns
// every field here: nothing else reads or writes them, so no field needs a
// lock. What others may see is published to p.stats with atomic stores.
//
// This file holds the loop and the placement of tasks; handoff.go the
// hand-off buffer; request.go the requests (pause, resize, stop, deadline)
// and the exit; reap.go the reaping of idle workers.
//
// Workers wait for tasks on the shared channel p.work. A send on it goes
// straight to the worker parked longest, if one is; else into the channel's
// small buffer, the hand-off buffer, from which the next worker to come
// free takes it without waiting for the dispatcher to run. No worker
// reports back after a task, and an idle worker costs the dispatcher
// nothing. Between loop iterations the dispatcher keeps this invariant,
// which makes every placement decision local: if the queue is non-empty
// and the pool is not paused, then workers >= max, the hand-off buffer is
// full, and the loop offers the queue's front on p.work, so the buffer is
// topped up as workers take from it. Tasks therefore leave the queue, and
// the buffer, in the order the pool accepted them.
type dispatcher struct {
	p *Pool

	// queue holds the waiting tasks in submission order. A waiter's task is
	// stored as nil (never a valid task) with the waiter at the back of
	// waiters, which keeps the common fire-and-forget entry to one word.
	queue   deque.Deque[func()]
	waiters deque.Deque[waiter]

	workers int // worker goroutines counted in: parked, busy or starting
	max     int // the current maximum (Resize changes it)
	// all lists the workers started and not yet forgotten (see survey);
	// retired sums what the forgotten ones did.
	all     []*worker
	retired struct{ done, received uint64 }
	// handed counts the tasks given to workers (sent on p.work, less those
	// taken back) and quits the zero jobs sent to tell workers to exit:
	// together, what workers received or will. quitsCounted is how many of
	// those workers are counted out of workers (see quitSent).
	handed, quits, quitsCounted uint64
	sent                        uint64 // sends of tasks on p.work; a task's seq
	submitted                   uint64 // tasks accepted; published as stats.submitted
	// unplaced counts the tasks accepted in a row that went to the queue;
	// see letWorkersRun.
	unplaced int
	wants    uint32 // what p.wants holds

	paused   bool
	pauseEnd <-chan struct{} // Done of the current pause's context
	pauseAck chan struct{}   // closed once no task runs in the current pause; nil once closed
	pauses   deque.Deque[*request]

	draining bool // Stop, StopWait or Shutdown was called: accept nothing more
	// deadline is closed once the first of the Shutdown contexts is done;
	// see checkDeadline.
	deadline <-chan struct{}

	clock reapClock // see reap.go
}

// run is the dispatcher goroutine. It returns, closing p.done, once the pool
// is stopped, the queue is empty and every worker has exited.
func (d *dispatcher) run() {
	p := d.p
	defer close(p.done)
	for !d.draining || d.queue.Len() > 0 || len(p.work) > 0 {
		if d.checkDeadline() {
			continue // the queue is empty now
		}
		d.seeQuits()
		if !d.draining && !d.paused && d.queue.Len() == 0 && d.workers <= d.max && d.wants == 0 && d.room() {
			// The common case: nothing to offer the workers and nothing
			// to watch but submissions, so a plain receive will do, which
			// is cheaper than a select. Requests come on p.tasks too.
			d.receive(<-p.tasks)
			continue
		}
		// Receive a submission only when it can be placed, so that Block
		// submitters wait in their send while a bounded queue is full.
		// Meanwhile offer reject, which answers the submitters that do not
		// wait. Both cases are off once draining. The wants are set before
		// room is looked at, so that a worker making room is seen or
		// signals (see updateWants).
		d.updateWants()
		var tasks <-chan job
		var reject chan<- struct{}
		if !d.draining {
			if d.room() {
				tasks = p.tasks
			} else {
				reject = p.reject
			}
		}
		// Offer a surplus worker the zero job, which tells it to exit, else
		// the queue's front, to the hand-off buffer or the first worker to
		// come free.
		var work chan<- job
		var next job
		switch {
		case d.workers-d.quitting() > d.max:
			work = p.work
		case !d.paused && d.queue.Len() > 0:
			work, next = p.work, d.front()
		}
		// Requests come on p.tasks while it is received; p.control is
		// watched only when it is not, as a select locks every channel it
		// watches, and p.tasks is the most contended lock of all.
		var control <-chan *request
		if tasks == nil {
			control = p.control
		}
		var wake <-chan struct{}
		if d.wants&(wantIdle|wantTaken) != 0 {
			wake = p.wake
		}
		select {
		case t := <-tasks:
			// A submission or a request.
			d.receive(t)
		case reject <- struct{}{}:
			// A Reject, CallerRuns or TrySubmit submitter learned the queue
			// is full; it counts the outcome itself.
		case work <- next:
			// The buffer had room, or a worker came free.
			if !next.valid() {
				d.quitSent(len(p.work) == 0)
			} else {
				d.pop()
				d.sentOne()
			}
		case r := <-control:
			// A request sent while p.tasks was not received.
			d.handle(r)
		case <-d.pauseEnd:
			// The current pause's context is done.
			d.endPause()
		case <-wake:
			// A worker ended a task while a pause waits for them all, or
			// took a task or a quit from the buffer: look again.
			d.checkPauseAck()
		case <-d.deadline:
			// A Shutdown's deadline passed while nothing else happened;
			// the next iteration's checkDeadline drops the queue.
		}
	}
	d.exit()
}

// receive takes t, a submission or a request, from p.tasks, then whatever
// else is already waiting there, without going round the loop for each.
func (d *dispatcher) receive(t job) {
	for n := 1; ; n++ {
		if t.r != nil {
			d.handle(t.r)
		} else {
			d.accept(t)
		}
		if n == 64 || d.draining || !d.room() {
			return
		}
		select {
		case t = <-d.p.tasks:
		default:
			return
		}
	}
}

// room reports whether one more task may wait: the queue and the hand-off
// buffer together hold fewer than the bound.
func (d *dispatcher) room() bool {
	bound := d.cfg().maxWaiting
	return bound == 0 || d.queue.Len()+len(d.p.work) < bound
}

func (d *dispatcher) cfg() *config { return &d.p.cfg }

// accept places a submitted task, keeping the invariant on the struct: to a
// parked worker, else to a new worker, else to the hand-off buffer, else to
// the queue.
func (d *dispatcher) accept(t job) {
	d.submitted++
	d.p.stats.submitted.Store(d.submitted)
	if d.queue.Len() == 0 && !d.paused && d.workers <= d.max && d.place(t) {
		return
	}
	d.push(t)
	d.letWorkersRun()
}

// place hands t to a parked worker, else to a new worker if there are fewer
// than max, else to the hand-off buffer, and reports whether it did: not if
// the buffer is full.
func (d *dispatcher) place(t job) bool {
	t.seq = d.sent + 1
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
			d.sentOne()
			return true
		default:
		}
	}
	if d.workers < d.max {
		d.start(t)
		return true
	}
	select {
	case d.p.work <- t:
		d.sentOne()
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

// fill hands queued tasks to parked workers and the hand-off buffer, and to
// new workers up to max. It restores the invariant after a resume or a
// resize.
func (d *dispatcher) fill() {
	if d.checkDeadline() {
		return
	}
	for !d.paused && d.queue.Len() > 0 && d.workers <= d.max {
		if !d.place(d.front()) {
			return
		}
		d.pop()
	}
}

// sentOne counts a task sent on p.work.
func (d *dispatcher) sentOne() {
	d.sent++
	d.handed++
	d.unplaced = 0
	if len(d.p.work) > 0 {
		d.notePeak() // it may be waiting in the buffer
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

// seeQuits counts out the workers of buffered quits that have been received.
// Workers count every quit they receive; those beyond what the dispatcher
// has counted out are buffered ones. (A direct quit is counted out before
// its worker counts it received.)
func (d *dispatcher) seeQuits() {
	if d.quits == d.quitsCounted {
		return
	}
	if got := d.p.stats.quitsReceived.Load(); got > d.quitsCounted {
		d.setWorkers(d.workers - int(got-d.quitsCounted))
		d.quitsCounted = got
	}
}

// start starts a worker goroutine whose first task is t; with the zero job
// the worker starts parked.
func (d *dispatcher) start(t job) {
	w := new(worker)
	if t.valid() {
		d.handed++
		w.phase.Store(1) // busy with t
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

// front returns the task at the front of the queue, which must not be
// empty, ready to send.
func (d *dispatcher) front() job {
	t := job{fn: d.queue.Front(), seq: d.sent + 1}
	if t.fn == nil {
		t.w = d.waiters.Front()
	}
	return t
}

// push appends t to the queue.
func (d *dispatcher) push(t job) {
	if t.w != nil {
		d.waiters.PushBack(t.w)
	}
	d.queue.PushBack(t.fn) // nil for a waiter
	d.setWaiting()
}

// pop removes the task at the front of the queue.
func (d *dispatcher) pop() job {
	t := job{fn: d.queue.PopFront()}
	if t.fn == nil {
		t.w = d.waiters.PopFront()
	}
	d.setWaiting()
	return t
}

// setWorkers records and publishes the worker count, and runs the reaping
// clock exactly while there is a worker above the minimum.
func (d *dispatcher) setWorkers(n int) {
	d.workers = n
	d.p.stats.setWorkers(n)
	d.clock.run(d.p, n > d.cfg().minWorkers)
}

// setWaiting publishes the queue's length, having recorded the peak.
func (d *dispatcher) setWaiting() {
	d.notePeak()
	d.p.stats.waiting.Store(int64(d.queue.Len()))
}

// notePeak records the waiting tasks, those in the hand-off buffer
// included, as PeakWaiting if they are more.
func (d *dispatcher) notePeak() {
	d.p.stats.peakAtLeast(d.queue.Len() + len(d.p.work) - d.quitting())
}

func (d *dispatcher) setState(s State) { d.p.stats.state.Store(int32(s)) }

// A request asks the dispatcher to do something other than place a task.
// It travels on p.tasks (as job.r) or p.control; done, if not nil, is
// closed once the request has taken effect.
type request struct {
	kind     requestKind
	n        int             // resize: the new maximum
	ctx      context.Context // pause: pause until it is done
	deadline <-chan struct{} // drain: a Shutdown's ctx.Done(), or nil
	done     chan struct{}
}

// A requestKind says what a request asks for.
type requestKind uint8

const (
	tickRequest   requestKind = iota + 1 // the reaping clock ticked
	pauseRequest                         // Pause: hold the queue until ctx is done
	resizeRequest                        // Resize: set the maximum to n
	stopRequest                          // Stop: drop the queue, then drain
	drainRequest                         // StopWait or Shutdown: run the queue, accept nothing more
)
