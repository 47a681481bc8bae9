package workerpool

import (
	"context"
	"runtime"
	"time"

	"github.com/gammazero/deque"
)

// A dispatcher is the state of the pool's one dispatcher goroutine. It owns
// every field here: nothing else reads or writes them, so no field needs a
// lock. What others may see is published to p.stats with atomic stores.
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

	workers int       // worker goroutines, parked or busy
	all     []*worker // every worker started, for reaping; exited ones are dropped at each tick
	max     int       // the current maximum (Resize changes it)
	started uint64    // tasks handed to workers; published as stats.started
	// finishedBefore is stats.finished at the last check of letWorkersRun.
	finishedBefore uint64

	paused   bool
	pauseEnd <-chan struct{} // Done of the current pause's context
	pauseAck chan struct{}   // closed once no task runs in the current pause; nil once closed
	pauses   deque.Deque[*control]
	// idleWake is p.idleWake while a pause waits for running tasks to
	// finish (p.wantIdle is then set, so every finishing worker signals).
	idleWake <-chan struct{}

	draining bool // Stop, StopWait or Shutdown was called: accept nothing more
	closed   bool // p.work is closed: the workers are exiting
	// deadline is closed once the first of the Shutdown contexts is done;
	// while it is open the loop watches it in the same select that hands
	// out queued tasks, so none starts after it closed.
	deadline <-chan struct{}
	exiting  chan struct{} // closed when the loop ends; stops deadline mergers

	// The reaping clock ticks every idle timeout while some worker above the
	// minimum exists; a worker parked at two consecutive ticks exits. So it
	// has been idle for more than one timeout and at most two. The clock
	// goroutine forwards the ticker's ticks as requests, so that the loop
	// need not watch the ticker.
	ticker  *time.Ticker // nil until first needed
	ticking bool         // the ticker runs
}

// A control is a request to the dispatcher from Pause, Resize, Stop,
// StopWait, Shutdown or the reaping clock. Exactly one of the first five
// fields is set. done, if not nil, is closed once the request has taken
// effect.
type control struct {
	resize int             // > 0: set the maximum to this
	pause  context.Context // pause until it is done
	stop   bool            // Stop: drop the queue, then drain
	drain  bool            // StopWait or Shutdown: run what is queued, accept nothing more
	tick   bool            // the reaping clock ticked
	// deadline, with drain, is a Shutdown's: once it is closed, start
	// nothing queued.
	deadline <-chan struct{}
	done     chan struct{}
}

// tickRequest is what the reaping clock sends; it is never written.
var tickRequest = &control{tick: true}

// run is the dispatcher goroutine. It returns, closing p.done, once the pool
// is stopped, the queue is empty and every worker has exited.
func (d *dispatcher) run() {
	p := d.p
	defer close(p.done)
	for !d.draining || d.queue.Len() > 0 {
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
			if !next.valid() { // the zero job
				d.setWorkers(d.workers - 1)
			} else {
				d.pop()
				d.handed()
			}
		case c := <-p.control:
			// A request sent while p.tasks was not received.
			d.handle(c)
		case <-d.pauseEnd:
			// The current pause's context is done.
			d.endPause()
		case <-d.idleWake:
			// A worker finished a task while a pause waits for them all.
			d.checkPauseAck()
		case <-d.deadline:
			// A Shutdown's deadline passed: start nothing more from the
			// queue. Stop, which that Shutdown calls now, returns it.
			d.deadline = nil
			d.p.deadlinePassed = true
			d.abandonQueue()
		}
	}
	d.exit()
}

// receive takes t, a submission or a request, from p.tasks, then whatever
// else is already waiting there, without going round the loop for each.
func (d *dispatcher) receive(t job) {
	for n := 1; ; n++ {
		if t.c != nil {
			d.handle(t.c)
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
	if d.p.stats.submitted.Add(1)%64 == 0 {
		d.letWorkersRun()
	}
	if d.queue.Len() == 0 && !d.paused && d.workers <= d.max {
		select {
		case d.p.work <- t:
			// A parked worker took it.
			d.handed()
			return
		default:
		}
		if d.workers < d.max {
			d.start(t)
			return
		}
	}
	d.push(t)
}

// letWorkersRun yields if the pool runs on one P and no task finished over
// the last 64 accepted while some were handed out. Each task readies a
// worker and then the next submitter, and the runtime runs the goroutine
// readied last first, inheriting the time slice, so on one P the
// dispatcher and busy submitters can keep the workers waiting in the run
// queue indefinitely (seen: 21 s at GOMAXPROCS=1). Stepping out of that
// chain lets them run. With more Ps, idle ones steal the waiting workers,
// and a yield would only put the dispatcher behind every runnable
// submitter (go run . in benchmarks/: 1M x 1 tiny tasks went from 1400 to
// 2500 ns/task).
func (d *dispatcher) letWorkersRun() {
	finished := d.p.stats.finished.Load()
	if finished == d.finishedBefore && d.started > finished && runtime.GOMAXPROCS(0) == 1 {
		runtime.Gosched()
	}
	d.finishedBefore = finished
}

// fill hands queued tasks to parked workers, then to new ones up to max. It
// restores the invariant after a resume or a resize.
func (d *dispatcher) fill() {
	for !d.paused && d.queue.Len() > 0 && d.workers <= d.max {
		select {
		case d.p.work <- d.front():
			d.pop()
			d.handed()
			continue
		default:
		}
		if d.workers == d.max {
			return
		}
		d.start(d.pop())
	}
}

// handed counts a task given to a worker.
func (d *dispatcher) handed() {
	d.started++
	d.p.stats.started.Store(d.started)
}

// start starts a worker goroutine whose first task is t; with the zero job
// the worker starts parked.
func (d *dispatcher) start(t job) {
	if t.valid() {
		d.handed()
	}
	w := new(worker)
	d.all = append(d.all, w)
	d.p.startWorker(w, t)
	d.setWorkers(d.workers + 1)
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

// reap advances the reaping clock and tells the workers parked at both this
// tick and the one before to exit, never going below MinWorkers. Those are
// the longest parked, and a channel serves its parked receivers in the order
// they parked, so each quit sent reaches one of them.
func (d *dispatcher) reap() {
	tick := d.p.tick.Add(1)
	d.quitParked(min(d.parkedSince(tick-1), d.workers-d.cfg().minWorkers))
}

// quitParked tells up to n parked workers, longest parked first, to exit:
// fewer if fewer are parked.
func (d *dispatcher) quitParked(n int) {
	for range n {
		select {
		case d.p.work <- job{}:
			d.setWorkers(d.workers - 1)
		default:
			return
		}
	}
}

// parkedSince counts the workers parked since before tick, as 1 + the tick
// at which they parked <= tick, and forgets the workers that exited.
func (d *dispatcher) parkedSince(tick uint64) int {
	n := 0
	live := d.all[:0]
	for _, w := range d.all {
		switch at := w.parkedAt.Load(); {
		case at == exited:
			continue
		case at != 0 && at <= tick:
			n++
		}
		live = append(live, w)
	}
	clear(d.all[len(live):])
	d.all = live
	return n
}

// resize sets the maximum. Parked workers above it exit now, busy ones when
// their task ends (the loop offers them quit); a larger maximum starts
// workers for queued tasks.
func (d *dispatcher) resize(n int) {
	d.max = n
	d.p.stats.maxWorkers.Store(int64(n))
	d.quitParked(d.workers - d.max)
	d.fill()
}

// handle carries out a control request.
func (d *dispatcher) handle(c *control) {
	switch {
	case d.closed:
		// Every worker has been told to exit, and the pool accepts
		// nothing: only the maximum is left to record.
		if c.resize > 0 {
			d.max = c.resize
			d.p.stats.maxWorkers.Store(int64(c.resize))
		}
	case c.tick:
		d.reap()
		return
	case c.pause != nil:
		d.pause(c) // answers c.done when the pause takes hold
		return
	case c.stop:
		// Drop the queue first, so that ending a pause in drain starts
		// none of it.
		d.abandonQueue()
		d.drain()
	case c.drain:
		if c.deadline != nil {
			d.addDeadline(c.deadline)
		}
		d.drain()
	default:
		d.resize(c.resize)
	}
	if c.done != nil {
		close(c.done)
	}
}

// addDeadline makes the loop watch one more Shutdown deadline. The first is
// watched as it is; each later one is merged with it by a goroutine that
// ends when either closes or the loop ends.
func (d *dispatcher) addDeadline(dl <-chan struct{}) {
	switch {
	case d.p.deadlinePassed:
		// The queue is already dropped.
	case d.deadline == nil:
		d.deadline = dl
	default:
		merged, old := make(chan struct{}), d.deadline
		d.p.wg.Add(1)
		go func() {
			defer d.p.wg.Done()
			select {
			case <-old:
			case <-dl:
			case <-d.exiting:
				return
			}
			close(merged)
		}()
		d.deadline = merged
	}
}

// pause starts a pause, or queues it behind the current one. Once draining,
// a pause request is answered at once: Stop and StopWait end pauses.
func (d *dispatcher) pause(c *control) {
	switch {
	case d.draining || c.pause.Err() != nil:
		close(c.done)
	case d.paused:
		d.pauses.PushBack(c)
	default:
		d.paused = true
		d.pauseEnd = c.pause.Done()
		d.pauseAck = c.done
		// Ask finishing workers to signal, then look: either this sees
		// the last one finish or that one sees the request.
		d.p.wantIdle.Store(true)
		d.idleWake = d.p.idleWake
		d.checkPauseAck()
		d.setState(Paused)
	}
}

// checkPauseAck answers the current pause once no task is running.
func (d *dispatcher) checkPauseAck() {
	if d.pauseAck != nil && d.started == d.p.stats.finished.Load() {
		d.ackPause()
	}
}

// ackPause lets the current Pause return and stops the workers' signals.
func (d *dispatcher) ackPause() {
	close(d.pauseAck)
	d.pauseAck = nil
	d.p.wantIdle.Store(false)
	d.idleWake = nil
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
	close(d.p.stopping) // submitters waiting in submit get ErrStopped now
	for d.paused {
		d.endPause() // queued pauses are answered at once now
	}
	d.setState(Stopping)
}

// abandonQueue empties the queue for Stop: fire-and-forget tasks are kept
// for Stop to return, in order, and waiters get ErrStopped. It may run twice
// (for a passed Shutdown deadline, then for Stop), but nothing enters the
// queue once draining, so the second time finds it empty.
func (d *dispatcher) abandonQueue() {
	n := d.queue.Len()
	if n == 0 {
		return
	}
	var tasks []func()
	for fn := range d.queue.IterPopFront() {
		if fn == nil {
			d.waiters.PopFront().finish(ErrStopped)
		} else {
			tasks = append(tasks, fn)
		}
	}
	d.p.abandoned = append(d.p.abandoned, tasks...)
	d.p.stats.abandoned.Add(uint64(n))
	d.setWaiting()
}

// exit tells every worker to exit once its task is done, by closing the
// channel they park on, and waits for their goroutines. Meanwhile it still
// answers requests, so that a Pause or Resize during a Stop returns.
func (d *dispatcher) exit() {
	close(d.exiting) // the clock and deadline mergers return
	close(d.p.work)
	d.closed = true
	exited := make(chan struct{})
	go func() {
		d.p.wg.Wait()
		close(exited)
	}()
	for {
		select {
		case c := <-d.p.control:
			d.handle(c)
		case <-exited:
			d.setWorkers(0) // stops the ticker; each exiting worker has counted itself out
			d.setState(Stopped)
			return
		}
	}
}

// setWorkers publishes the worker count and runs the reaping clock exactly
// while there is a worker above the minimum, so an idle pool at its minimum
// makes no wake-ups.
func (d *dispatcher) setWorkers(n int) {
	d.workers = n
	s := &d.p.stats
	s.workers.Store(int64(n))
	if int64(n) > s.peakWorkers.Load() {
		s.peakWorkers.Store(int64(n))
	}
	timeout := d.cfg().idleTimeout
	want := n > d.cfg().minWorkers && timeout > 0
	switch {
	case want && d.ticker == nil:
		d.ticker = time.NewTicker(timeout)
		d.p.wg.Add(1)
		go d.p.clock(d.ticker.C, d.exiting)
	case want && !d.ticking:
		d.ticker.Reset(timeout)
	case !want && d.ticking:
		d.ticker.Stop() // no tick is received after Stop returns
	}
	d.ticking = want
}

func (d *dispatcher) setWaiting() {
	n := int64(d.queue.Len())
	s := &d.p.stats
	s.waiting.Store(n)
	if n > s.peakWaiting.Load() {
		s.peakWaiting.Store(n)
	}
}

func (d *dispatcher) setState(s State) { d.p.stats.state.Store(int32(s)) }
