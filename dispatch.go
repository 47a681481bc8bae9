package workerpool

import (
	"context"

	"github.com/gammazero/deque"
)

// A dispatcher is the state of the pool's one dispatcher goroutine. It owns
// every field here: nothing else reads or writes them, so no field needs a
// lock. What others may see is published to p.stats with atomic stores.
//
// This file holds the loop; place.go the placement of tasks; lane.go and
// turns.go the lanes of waiting tasks and their turns; handoff.go the
// hand-off buffer; request.go the requests (pause, resize, stop, deadline)
// and the exit; reap.go the reaping of idle workers.
//
// Workers wait for tasks on the shared channel p.work. A send on it goes
// straight to the worker parked longest, if one is; else into the channel's
// small buffer, the hand-off buffer, from which the next worker to come
// free takes it without waiting for the dispatcher to run. No worker
// reports back after a task, and an idle worker costs the dispatcher
// nothing. Between loop iterations the dispatcher keeps this invariant,
// which makes every placement decision local: if a lane has a task that may
// start and the pool is not paused, then workers >= max, the hand-off
// buffer is full (or, while lanes take turns, holds a task), and the loop
// offers the next task on p.work, so the buffer is topped up as workers take
// from it. Tasks therefore leave each lane, and the buffer, in the order the
// pool accepted them.
type dispatcher struct {
	p *Pool

	// own is the pool's own lane; ring lists the lanes with waiting tasks,
	// in the order of their turns (see turns.go); waiting counts their
	// tasks. busy lists the sub-pools' lanes with tasks out, whose ends
	// seeEnds looks for, and freeLines keeps key lines for reuse.
	own       lane
	ring      []*lane
	waiting   int
	busy      []*lane
	freeLines []*keyLine
	// offered is the lane, key line and ring position of the task the
	// loop offers on p.work, for commit.
	offered     *lane
	offeredLine *keyLine
	offeredAt   int
	linesOut    int // key lines with a task out, whose ends seeEnds looks for
	// bufLane is the lane whose tasks the hand-off buffer may hold, unless
	// bufMixed says it may hold tasks of several lanes.
	bufLane  *lane
	bufMixed bool
	subpools bool    // the pool has a sub-pool (see deep)
	stopping []*lane // sub-pools' lanes with Stop or StopWait requests waiting

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
	for !d.finished() {
		if d.checkDeadline() {
			continue // the queue is empty now
		}
		d.seeQuits()
		if !d.draining && !d.paused && d.waiting == 0 && d.workers <= d.max && d.wants == 0 && len(d.stopping) == 0 && d.room() {
			// The common case: nothing to offer the workers and nothing
			// to watch but submissions, so a plain receive will do, which
			// is cheaper than a select. Requests come on p.tasks too.
			// d.wants is as the last iteration set it; what a request
			// handled since may have changed is looked at here: with
			// nothing waiting, only a sub-pool's stop waiting for its
			// tasks to end makes ends matter (see endsMatter).
			d.receive(<-p.tasks)
			continue
		}
		if d.workers < d.max {
			// A waiting task may start once a task of its sub-pool or its
			// key ends, or once another lane's task must wait: a new
			// worker takes it.
			d.fill()
		}
		// Receive a submission only when it can be placed, so that Block
		// submitters wait in their send while a bounded queue is full.
		// Meanwhile offer reject, which answers the submitters that do not
		// wait. Both cases are off once draining. The wants are set before
		// room is looked at, so that a worker making room is seen or
		// signals (see updateWants). So are they before the quits
		// received are counted: a worker that takes a quit after that
		// count sees wantTaken and signals.
		d.updateWants()
		if d.seeQuits() {
			continue // fewer workers: look again
		}
		if d.wants&wantEnds != 0 && d.countEnds() {
			// Sub-pools' tasks ended before the workers were asked to
			// signal their ends (see endsMatter): look again.
			d.fill()
			continue
		}
		if d.finished() {
			// The workers took the last buffered tasks since the loop
			// looked, before the wants asked them to signal: done.
			break
		}
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
		// the next task, to the hand-off buffer or the first worker to come
		// free.
		var work chan<- job
		var next job
		switch {
		case d.workers-d.quitting() > d.max:
			work = p.work
		case !d.paused && (d.deep() || len(p.work) == 0):
			if t, ok := d.offer(); ok {
				work, next = p.work, t
			}
		}
		// Requests come on p.tasks while it is received; p.control is
		// watched only when it is not, as a select locks every channel it
		// watches, and p.tasks is the most contended lock of all.
		var control <-chan *request
		if tasks == nil {
			control = p.control
		}
		var wake <-chan struct{}
		if d.wants&(wantIdle|wantTaken|wantEnds) != 0 {
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
				d.sentOne(d.offered, len(p.work) == 1)
				d.commit()
			}
		case r := <-control:
			// A request sent while p.tasks was not received.
			d.handle(r)
		case <-d.pauseEnd:
			// The current pause's context is done.
			d.endPause()
		case <-wake:
			// A worker ended a task while a pause waits for them all, or
			// a keyed or sub-pool task, or took a task or a quit from the
			// buffer: look again.
			d.checkPauseAck()
			d.seeEnds()
		case <-d.deadline:
			// A Shutdown's deadline passed while nothing else happened;
			// the next iteration's checkDeadline drops the queue.
		}
	}
	d.exit()
}

// finished reports whether the loop is done: the pool is stopping and no
// task waits, in a lane or in the hand-off buffer.
func (d *dispatcher) finished() bool {
	return d.draining && d.waiting == 0 && len(d.p.work) == 0
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

// room reports whether one more task may wait: the lanes and the hand-off
// buffer together hold fewer than the bound.
func (d *dispatcher) room() bool {
	bound := d.cfg().maxWaiting
	return bound == 0 || d.waiting+len(d.p.work) < bound
}

func (d *dispatcher) cfg() *config { return &d.p.cfg }

// setWorkers records and publishes the worker count, and runs the reaping
// clock exactly while there is a worker above the minimum.
func (d *dispatcher) setWorkers(n int) {
	d.workers = n
	d.p.stats.setWorkers(n)
	d.clock.run(d.p, n > d.cfg().minWorkers)
}

// setWaiting publishes the tasks waiting in the lanes, having recorded the
// peak.
func (d *dispatcher) setWaiting() {
	d.notePeak()
	d.p.stats.waiting.Store(int64(d.waiting))
}

// notePeak records the waiting tasks, those in the hand-off buffer
// included, as PeakWaiting if they are more.
func (d *dispatcher) notePeak() {
	d.p.stats.peakAtLeast(d.waiting + len(d.p.work) - d.quitting())
}

func (d *dispatcher) setState(s State) { d.p.stats.state.Store(int32(s)) }

// A request asks the dispatcher to do something other than place a task.
// It travels on p.tasks (as job.r) or p.control; done, if not nil, is
// closed once the request has taken effect.
type request struct {
	kind     requestKind
	n        int             // resize, subResize: the new maximum or limit
	ctx      context.Context // pause: pause until it is done
	deadline <-chan struct{} // drain: a Shutdown's ctx.Done(), or nil
	lane     *lane           // sub*: the sub-pool's lane
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
	subResizeRequest                        // Subpool.Resize: set the lane's limit to n
	subStopRequest                          // Subpool.Stop: drop the lane's tasks, wait for it to be idle
	subDrainRequest                         // Subpool.StopWait: wait for the lane to be idle
	subpoolRequest                          // Pool.Subpool: hand out in turns from now on
)
