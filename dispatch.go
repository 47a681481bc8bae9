package workerpool

import (
	"context"
	"time"

	"github.com/gammazero/deque"
)

// A dispatcher is the state of the pool's one dispatcher goroutine. It owns
// every field here: nothing else reads or writes them, so no field needs a
// lock. What others may see is published to p.stats with atomic stores.
//
// Between loop iterations it keeps this invariant, which makes every
// placement decision local: if the queue is non-empty and the pool is not
// paused, then no worker is idle and workers >= max. So a task is queued
// only when no worker could take it, and tasks leave the queue in FIFO
// order as workers come free.
type dispatcher struct {
	p *Pool

	// queue holds the waiting tasks in submission order. A SubmitWait task
	// is stored as nil (never a valid task) with its waiter at the back of
	// waiters, which keeps the common fire-and-forget entry to one word.
	queue   deque.Deque[func()]
	waiters deque.Deque[waiter]

	// idle holds the idle workers, most recently idle at the back: new work
	// goes to the back (warm) worker and reaping takes from the front, so
	// idleSince never decreases from front to back.
	idle    deque.Deque[*worker]
	workers int // worker goroutines, idle or busy
	busy    int // workers handed a task that have not reported back
	max     int // the current maximum (Resize changes it)

	paused   bool
	pauseEnd <-chan struct{} // Done of the current pause's context
	pauseAck chan struct{}   // closed once busy reaches 0 in the current pause; nil once closed
	pauses   deque.Deque[control]

	draining  bool              // Stop, StopWait or Shutdown was called: accept nothing more
	deadlines []<-chan struct{} // Done channels of Shutdown contexts

	// The reaping clock ticks every idle timeout while some worker above the
	// minimum exists; a worker idle at two consecutive ticks exits. So it
	// has been idle for more than one timeout and at most two.
	ticker *time.Ticker
	tickC  <-chan time.Time // ticker.C while the clock runs, else nil
	tick   uint64           // ticks so far
}

// A control is a request from Pause, Resize or Shutdown, answered by closing
// done. Exactly one of the first three fields is set.
type control struct {
	resize   int             // > 0: set the maximum to this
	pause    context.Context // pause until it is done
	deadline <-chan struct{} // a Shutdown deadline: start nothing queued once it is closed
	done     chan struct{}
}

// run is the dispatcher goroutine. It returns, closing p.done, once the pool
// is stopped, the queue is empty and every worker has exited.
func (d *dispatcher) run() {
	p := d.p
	defer close(p.done)
	stopReq, drainReq := p.stopReq, p.drainReq
	for !d.draining || d.queue.Len() > 0 || d.busy > 0 {
		// Receive a submission only when it can be placed, so that Block
		// submitters wait in their send while a bounded queue is full.
		// Meanwhile offer reject, which answers the submitters that do not
		// wait. Both cases are off once draining.
		var tasks <-chan job
		var reject chan<- struct{}
		if !d.draining {
			if d.cfg().maxWaiting == 0 || d.queue.Len() < d.cfg().maxWaiting {
				tasks = p.tasks
			} else {
				reject = p.reject
			}
		}
		select {
		case t := <-tasks:
			// A submission: to an idle or new worker, else to the queue.
			d.accept(t)
		case reject <- struct{}{}:
			// A Reject, CallerRuns or TrySubmit submitter learned the queue
			// is full; it counts the outcome itself.
		case w := <-p.ready:
			// A worker finished a task and is free.
			d.finished(w)
		case c := <-p.control:
			// Pause, Resize, or a Shutdown's deadline.
			d.handle(c)
		case <-d.pauseEnd:
			// The current pause's context is done.
			d.endPause()
		case <-d.tickC:
			// Reap workers idle since the tick before last.
			d.reap()
		case <-stopReq:
			// Stop, or Shutdown past its deadline: drop the queue first, so
			// that ending a pause in drain starts none of it.
			stopReq = nil
			d.abandonQueue()
			d.drain()
		case <-drainReq:
			// StopWait or Shutdown: run what is queued, accept nothing more.
			drainReq = nil
			d.drain()
		}
	}
	d.exit()
}

func (d *dispatcher) cfg() *config { return &d.p.cfg }

// accept places a submitted task, keeping the invariant on the struct.
func (d *dispatcher) accept(t job) {
	d.p.stats.submitted.Add(1)
	if d.queue.Len() == 0 && !d.paused {
		if d.idle.Len() > 0 {
			d.hand(d.idle.PopBack(), t)
			return
		}
		if d.workers < d.max {
			d.start(t)
			return
		}
	}
	d.push(t)
}

// finished takes back a worker that completed its task: it retires the
// worker if Resize left too many, else gives it the next queued task, else
// lets it idle.
func (d *dispatcher) finished(w *worker) {
	d.setBusy(d.busy - 1)
	switch {
	case d.workers > d.max:
		d.retire(w)
	case d.mayStartQueued():
		d.hand(w, d.pop())
	default:
		w.idleSince = d.tick
		d.idle.PushBack(w)
	}
	if d.busy == 0 && d.pauseAck != nil {
		close(d.pauseAck)
		d.pauseAck = nil
	}
}

// fill hands queued tasks to idle workers, then to new ones up to max. It
// restores the invariant after a resume, a resize or the start of a drain.
func (d *dispatcher) fill() {
	for d.mayStartQueued() {
		switch {
		case d.idle.Len() > 0:
			d.hand(d.idle.PopBack(), d.pop())
		case d.workers < d.max:
			d.start(d.pop())
		default:
			return
		}
	}
}

// mayStartQueued reports whether a task may leave the queue for a worker
// now. Once a Shutdown deadline has passed none may: the queue is dropped
// here, as the Stop that Shutdown is about to call would drop it, because a
// worker reporting back before that Stop arrives must not start another
// task that Shutdown would then wait for.
func (d *dispatcher) mayStartQueued() bool {
	if d.paused || d.queue.Len() == 0 {
		return false
	}
	for _, deadline := range d.deadlines { // empty unless Shutdown was called
		select {
		case <-deadline:
			d.p.deadlinePassed = true
			d.abandonQueue()
			return false
		default:
		}
	}
	return true
}

// hand gives t to an idle worker; the send never blocks (see worker.jobs).
func (d *dispatcher) hand(w *worker, t job) {
	w.jobs <- t
	d.setBusy(d.busy + 1)
}

// start starts a worker goroutine whose first task is t.
func (d *dispatcher) start(t job) {
	w := d.spawn()
	d.hand(w, t)
}

// spawn starts an idle worker goroutine and counts it.
func (d *dispatcher) spawn() *worker {
	w := &worker{jobs: make(chan job, 1), idleSince: d.tick}
	d.p.wg.Add(1)
	go d.p.work(w)
	d.setWorkers(d.workers + 1)
	return w
}

// retire tells an idle worker's goroutine to exit.
func (d *dispatcher) retire(w *worker) {
	close(w.jobs)
	d.setWorkers(d.workers - 1)
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

// reap advances the reaping clock and retires the workers idle at both this
// tick and the one before, oldest first, never going below MinWorkers.
func (d *dispatcher) reap() {
	d.tick++
	for d.workers > d.cfg().minWorkers && d.idle.Len() > 0 && d.tick-d.idle.Front().idleSince >= 2 {
		d.retire(d.idle.PopFront())
	}
}

// resize sets the maximum. Idle workers above it exit now, busy ones when
// their task ends; a larger maximum starts workers for queued tasks.
func (d *dispatcher) resize(n int) {
	d.max = n
	d.p.stats.maxWorkers.Store(int64(n))
	for d.workers > d.max && d.idle.Len() > 0 {
		d.retire(d.idle.PopFront())
	}
	d.fill()
}

// handle carries out a control request.
func (d *dispatcher) handle(c control) {
	switch {
	case c.pause != nil:
		d.pause(c) // answers c.done when the pause takes hold
		return
	case c.deadline != nil:
		d.deadlines = append(d.deadlines, c.deadline)
	default:
		d.resize(c.resize)
	}
	close(c.done)
}

// pause starts a pause, or queues it behind the current one. Once draining,
// a pause request is answered at once: Stop and StopWait end pauses.
func (d *dispatcher) pause(c control) {
	switch {
	case d.draining || c.pause.Err() != nil:
		close(c.done)
	case d.paused:
		d.pauses.PushBack(c)
	default:
		d.paused = true
		d.pauseEnd = c.pause.Done()
		d.pauseAck = c.done
		if d.busy == 0 {
			close(d.pauseAck)
			d.pauseAck = nil
		}
		d.setState(Paused)
	}
}

// endPause ends the current pause and starts the next queued one, if any;
// with none, the pool resumes handing out tasks.
func (d *dispatcher) endPause() {
	if d.pauseAck != nil {
		close(d.pauseAck) // its caller waits no longer for running tasks
		d.pauseAck = nil
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
// runs. The loop in run ends once the queue is empty and no worker is busy.
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
// for Stop to return, in order, and waiting callers get ErrStopped. It may
// run twice (for a passed Shutdown deadline, then for Stop), but nothing
// enters the queue once draining, so the second time finds it empty.
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
	d.p.abandoned = tasks
	d.p.stats.abandoned.Add(uint64(n))
	d.setWaiting()
}

// exit retires the workers, all idle now, and waits for their goroutines.
func (d *dispatcher) exit() {
	for d.idle.Len() > 0 {
		d.retire(d.idle.PopFront())
	}
	if d.ticker != nil {
		d.ticker.Stop()
	}
	d.p.wg.Wait()
	d.setState(Stopped)
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
	switch want := n > d.cfg().minWorkers && timeout > 0; {
	case want && d.tickC == nil:
		if d.ticker == nil {
			d.ticker = time.NewTicker(timeout)
		} else {
			d.ticker.Reset(timeout)
		}
		d.tickC = d.ticker.C
	case !want && d.tickC != nil:
		d.ticker.Stop()
		d.tickC = nil
	}
}

func (d *dispatcher) setBusy(n int) {
	d.busy = n
	d.p.stats.busy.Store(int64(n))
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
