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
// This file holds the loop and the placement of tasks; request.go the
// requests (pause, resize, stop, deadline) and the exit; reap.go the
// reaping of idle workers.
//
// Workers wait for tasks on the shared unbuffered channel p.work, so a send
// on it succeeds exactly when some worker is parked there: no worker reports
// back after a task, and an idle worker costs the dispatcher nothing. Between
// loop iterations the dispatcher keeps this invariant, which makes every
// placement decision local: if the queue is non-empty and the pool is not
// paused, then workers >= max, and the loop offers the queue's front on
// p.work, so the first worker to come free takes it. Tasks therefore leave
// the queue in FIFO order.
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
	// handed counts the tasks given to workers and quits the zero jobs
	// that told parked workers to exit: together, what workers received.
	handed, quits uint64
	submitted     uint64 // tasks accepted; published as stats.submitted
	// unplaced counts the tasks accepted in a row that no parked worker
	// took; see letWorkersRun.
	unplaced int

	paused   bool
	pauseEnd <-chan struct{} // Done of the current pause's context
	pauseAck chan struct{}   // closed once no task runs in the current pause; nil once closed
	pauses   deque.Deque[*request]
	// idleWake is p.idleWake while a pause waits for running tasks to
	// finish (p.wantIdle is then set, so every finishing worker signals).
	idleWake <-chan struct{}

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
	for !d.draining || d.queue.Len() > 0 {
		if d.checkDeadline() {
			continue // the queue is empty now
		}
		if !d.draining && !d.paused && d.queue.Len() == 0 && d.workers <= d.max {
			// The common case: nothing to offer the workers and nothing
			// to watch but submissions, so a plain receive will do, which
			// is cheaper than a select. Requests come on p.tasks too.
			d.receive(<-p.tasks)
			continue
		}
		// Receive a submission only when it can be placed, so that Block
		// submitters wait in their send while a bounded queue is full.
		// Meanwhile offer reject, which answers the submitters that do not
		// wait. Both cases are off once draining.
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
		// the queue's front, to the first worker to come free.
		var work chan<- job
		var next job
		switch {
		case d.workers > d.max:
			work = p.work
		case !d.paused && d.queue.Len() > 0:
			work, next = p.work, d.front()
		}
		select {
		case t := <-tasks:
			// A submission or a request.
			d.receive(t)
		case reject <- struct{}{}:
			// A Reject, CallerRuns or TrySubmit submitter learned the queue
			// is full; it counts the outcome itself.
		case work <- next:
			// A worker came free and took the offer.
			if !next.valid() {
				d.quitSent()
			} else {
				d.pop()
				d.handedOne()
				d.unplaced = 0
			}
		case r := <-p.control:
			// A request sent while p.tasks was not received.
			d.handle(r)
		case <-d.pauseEnd:
			// The current pause's context is done.
			d.endPause()
		case <-d.idleWake:
			// A worker finished a task while a pause waits for them all.
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

// room reports whether the queue can take one more task.
func (d *dispatcher) room() bool {
	return d.cfg().maxWaiting == 0 || d.queue.Len() < d.cfg().maxWaiting
}

func (d *dispatcher) cfg() *config { return &d.p.cfg }

// accept places a submitted task, keeping the invariant on the struct: to a
// parked worker, else to a new one, else to the queue.
func (d *dispatcher) accept(t job) {
	d.submitted++
	d.p.stats.submitted.Store(d.submitted)
	if d.queue.Len() == 0 && !d.paused && d.workers <= d.max {
		select {
		case d.p.work <- t:
			// A parked worker took it.
			d.handedOne()
			d.unplaced = 0
			return
		default:
		}
		if d.workers < d.max {
			d.start(t)
			return
		}
	}
	d.push(t)
	d.letWorkersRun()
}

// letWorkersRun yields once 64 tasks in a row found no parked worker, if the
// pool runs on one P. Each task readies a worker and then the next
// submitter, and the runtime runs the goroutine readied last first,
// inheriting the time slice, so on one P the dispatcher and busy submitters
// can keep the workers waiting in the run queue indefinitely, while tasks
// pile up in the queue. Stepping out of that chain lets them run. With more
// Ps, idle ones steal the waiting workers, and a yield would only put the
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

// fill hands queued tasks to parked workers, then to new ones up to max. It
// restores the invariant after a resume or a resize.
func (d *dispatcher) fill() {
	if d.checkDeadline() {
		return
	}
	for !d.paused && d.queue.Len() > 0 && d.workers <= d.max {
		select {
		case d.p.work <- d.front():
			d.pop()
			d.handedOne()
			continue
		default:
		}
		if d.workers == d.max {
			return
		}
		d.start(d.pop())
	}
}

// handedOne counts a task given to a worker.
func (d *dispatcher) handedOne() { d.handed++ }

// quitSent counts a worker told to exit.
func (d *dispatcher) quitSent() {
	d.quits++
	d.setWorkers(d.workers - 1)
}

// start starts a worker goroutine whose first task is t; with the zero job
// the worker starts parked.
func (d *dispatcher) start(t job) {
	w := new(worker)
	if t.valid() {
		d.handedOne()
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

// front returns the task at the front of the queue, which must not be empty.
func (d *dispatcher) front() job {
	if fn := d.queue.Front(); fn != nil {
		return job{fn: fn, queued: true}
	}
	return job{w: d.waiters.Front(), queued: true}
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

func (d *dispatcher) setWaiting() {
	n := int64(d.queue.Len())
	s := &d.p.stats
	if n > s.peakWaiting.Load() {
		s.peakWaiting.Store(n) // before the gauge: Waiting <= PeakWaiting
	}
	s.waiting.Store(n)
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
