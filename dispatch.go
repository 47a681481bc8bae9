package workerpool

import (
	"runtime"
	"slices"

	"github.com/gammazero/deque"
)

// A dispatcher is the state of the pool's one dispatcher goroutine, which
// owns every field here: nothing else reads or writes them, so none needs
// a lock. What others may see it publishes in Pool.stats.
//
// Its loop receives, asks the scheduler, and acts. It receives submissions
// and requests, and the signals of workers; it asks the scheduler where a
// task goes and which goes next; and it acts: it hands tasks to workers,
// starts workers, takes hand-offs back, and answers requests.
//
// Before it waits, the loop keeps this invariant, which checkLoop checks
// in the build tagged workerpool_checkloop: unless the pool is paused or
// dropping its queue, or every place under the maximum is taken, the next
// task the scheduler would hand out cannot go yet. There are as many
// workers as the maximum, and: the task may go only to a free worker, and
// none is; or it may wait in the hand-off buffer only alone, or not behind
// another lane's tasks, and it would; or it may wait there, and the select
// offers it to the full buffer; or surplus workers are leaving. Where a
// worker may change that after the loop looked, the loop has asked the
// workers to signal it (the want bits), and looks again when one does.
type dispatcher struct {
	p       *Pool
	sched   *scheduler
	max     int        // the current maximum of workers (Resize changes it)
	subs    []*Subpool // the sub-pools whose tasks the loop has seen, by lane id
	stops   []*request // sub-pools' Stop and StopWait requests, waiting for their lanes to be idle
	dropped []entry    // the tasks Stop or a Shutdown deadline dropped, for Stop to return
	got     []entry    // reports taken from Pool.reports, reused
	crew    crew       // the workers, for reaping and Status

	out         handOffs  // the hand-offs sent on Pool.work that may be pending
	back        []handOff // revoke's scratch, and backEntries
	backEntries []entry
	// handed counts the tasks given to workers (less those revoked) and
	// quits the quits: together, what workers received or will.
	handed, quits uint64
	submitted     uint64 // tasks accepted; published as stats.submitted
	unplaced      int    // tasks accepted in a row that had to wait; see letWorkersRun
	wants         uint32 // what Pool.wants holds

	paused   bool
	pauseEnd <-chan struct{} // Done of the current pause's context
	pauseAck chan struct{}   // closed once no task runs in the current pause; nil once closed
	pauses   deque.Deque[*request]

	draining  bool              // Stop, StopWait or Shutdown was called: accept nothing more
	dropping  bool              // Stop or a passed deadline dropped the queue: drop what comes
	down      bool              // the loop has ended and Pool.work is closed
	ended     bool              // every goroutine the pool started has exited
	deadlines []<-chan struct{} // the Shutdown contexts' Done channels (see watchDeadline)
	deadline  <-chan struct{}   // closed once the first of the deadlines is

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
		checkLoop(d)
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
			d.sentOne(next)
			d.publishWaiting()
			ok = false
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
		if ok {
			d.out.unsent() // the offer's task is still the scheduler's
		}
	}
	d.windDown()
}

// quiet reports whether the loop has nothing to do but receive: nothing
// waits to be handed out, no task is out whose end the scheduler must
// hear of, no worker is asked to signal or to retire, and no request waits
// for anything.
func (d *dispatcher) quiet() bool {
	return d.sched.waiting == 0 && d.sched.reported == 0 && d.wants == 0 && !d.draining && !d.paused &&
		len(d.stops) == 0 && d.room() && d.workers() <= d.max
}

// finished reports whether the loop is done: the pool is stopping, no task
// waits in a lane, every hand-off is claimed or revoked, no submitter is on
// its way (none that passed its check of Pool.closed is still to hand
// over), and no give-up is under way.
func (d *dispatcher) finished() bool {
	return d.draining && d.sched.waiting == 0 && d.p.senders.Load() == 0 && d.p.givingUp.Load() == 0 && d.out.settled()
}

// settle brings the loop up to date before it waits: it takes the
// workers' reports, drops the queue if a Shutdown deadline has passed,
// hands out what may start, and asks the workers to signal what it waits
// for. It reports whether to look again rather than wait: a worker may have
// done something just before the wants asked it to signal it.
func (d *dispatcher) settle() bool {
	d.collect()
	d.settleStops()
	if d.checkDeadline() {
		return true
	}
	if surplus := d.workers() - d.max; surplus > 0 && !d.down {
		// A surplus worker that parked as Resize took effect, before it
		// could see it was surplus, leaves now.
		d.quitParked(surplus, d.max)
	}
	d.fill()
	workers := d.workers()
	d.updateWants()
	return d.collect() || d.checkPauseAck() || d.fillable() || d.workers() < workers || d.finished()
}

// fillable reports whether fill would hand out a task now: workers may have
// come free, or taken hand-offs from the buffer, since fill looked, and
// before the wants asked them to signal it.
func (d *dispatcher) fillable() bool {
	if !d.canFill() {
		return false
	}
	e, ok := d.sched.peek()
	return ok && d.placeable(e.lane, d.ahead(e.lane))
}

// receiving reports whether the loop receives on p.tasks: while the queue
// has room, and once draining only from the submitters that passed their
// check of p.closed before it was set.
func (d *dispatcher) receiving() bool {
	return d.room() && (!d.draining || d.cfg().maxWaiting == 0)
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

// accept takes a submitted task: to a worker at once if it may start and
// nothing waits (a parked worker, a new one or the hand-off buffer), else
// into the scheduler.
func (d *dispatcher) accept(m message) {
	d.submitted++
	d.p.stats.submitted.Store(d.submitted)
	var e entry
	if m.kind == taskMessage && m.sub == nil {
		// The common case, kept short: a task of the pool's own queue.
		e = entry{task: m.task, lane: &d.sched.own, seq: d.sched.nextSeq(), accepted: d.acceptedNow()}
	} else {
		var l *lane
		if m.sub != nil {
			l = d.see(m.sub)
			m.sub.stats.submitted.Add(1)
		}
		e = d.sched.admit(m.task, l, m.key, m.kind == keyedTaskMessage, d.acceptedNow())
	}
	if m.task.w != nil {
		noteSpot(e)
	}
	switch {
	case d.dropping:
		// Stop dropped the queue: a task that a submitter on its way
		// handed over since goes the same way.
		d.drop(e)
	case !d.paused && d.sched.startsNow(e) && d.roomForOneMore() && d.place(e, d.ahead(e.lane)):
		d.sched.start(e)
		d.publishInHand()
		if len(d.p.work) > 0 {
			d.notePeak() // it may wait in the buffer
		}
	default:
		d.wait(e, m.sub)
		d.letWorkersRun()
	}
}

// acceptedNow returns the time of a task accepted now, for its timing, or
// 0 if the pool does not time its tasks.
func (d *dispatcher) acceptedNow() int64 {
	if !d.cfg().timings {
		return 0
	}
	return d.p.now()
}

// wait puts e, which may not start now, into the scheduler. If e's lane is
// the first or second to wait and the hand-off buffer holds tasks of other
// lanes, handed out while no lane but theirs waited, they come back to
// their lanes first, to take turns with e's.
func (d *dispatcher) wait(e entry, sub *Subpool) {
	if !e.lane.inRing && d.sched.lanesWaiting() <= 1 && !d.out.allOf(e.lane) {
		d.recall(nil)
	}
	d.sched.wait(e)
	d.publishWaiting()
	if sub != nil {
		sub.notePeak(d.buffered())
	}
}

// fill hands out waiting tasks to parked workers, new workers and the
// hand-off buffer, as many as may start.
func (d *dispatcher) fill() {
	for d.canFill() {
		e, ok := d.sched.peek()
		if !ok {
			break
		}
		ahead := d.ahead(e.lane)
		if ahead == 0 {
			if d.workers() >= d.max && !d.spareWorker() {
				break
			}
			if e.lane.held > 0 && d.collect() {
				continue // a key freed as its task ended: look again
			}
		}
		if !d.place(e, ahead) {
			break
		}
		d.sched.take()
	}
	d.publishWaiting()
}

// canFill reports whether the loop may hand out tasks now.
func (d *dispatcher) canFill() bool {
	return !d.paused && !d.dropping && d.sched.waiting > 0 && d.roomForOneMore()
}

// roomForOneMore reports whether one more task may be handed out without
// more than the maximum running at once: always, with no more workers than
// the maximum. After Resize lowered it, while surplus workers leave, a task
// may go only while fewer than the maximum are handed out and not done.
func (d *dispatcher) roomForOneMore() bool {
	return d.workers() <= d.max || d.handed-d.crew.doneTasks() < uint64(d.max)
}

// letWorkersRun yields once 64 tasks in a row had to wait, if the pool
// runs on one P. Each task readies a worker and then the next submitter,
// and the runtime runs the goroutine readied last first, so on one P the
// dispatcher and busy submitters can keep the workers waiting in the run
// queue indefinitely, while tasks pile up. With more Ps, idle ones steal
// the workers, and a yield would only put the dispatcher behind them all.
func (d *dispatcher) letWorkersRun() {
	if d.unplaced++; d.unplaced < 64 {
		return
	}
	d.unplaced = 0
	if runtime.GOMAXPROCS(0) == 1 {
		runtime.Gosched()
	}
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
	return bound == 0 || d.sched.waiting+d.buffered() < bound
}

// buffered returns how many tasks may wait in the hand-off buffer: at most
// what it holds, less the revoked hand-offs that wait there for a worker
// to drop them, and at most the hand-offs not yet known to be claimed.
func (d *dispatcher) buffered() int {
	n := len(d.p.work)
	if n == 0 {
		return 0
	}
	return min(n, d.out.pending())
}

func (d *dispatcher) cfg() *config { return &d.p.cfg }

// workers returns how many worker goroutines are counted in: parked, busy
// or starting.
func (d *dispatcher) workers() int { return d.p.stats.workerCount() }

// publishWaiting publishes the tasks in hand, having recorded the peak of
// those waiting.
func (d *dispatcher) publishWaiting() {
	d.notePeak()
	d.publishInHand()
}

// publishInHand publishes the tasks in hand (see stats.inHand): only
// between moves, once a task handed out has left the scheduler's count,
// so that Status never counts one twice.
func (d *dispatcher) publishInHand() {
	d.p.stats.inHand.Store(uint64(d.sched.waiting) + d.handed)
}

// notePeak records the waiting tasks, those in the hand-off buffer
// included, as PeakWaiting if they are more. What the buffer holds is
// known only to within the hand-offs revoked or claimed meanwhile, so the
// count is held to the bound, which room keeps the tasks waiting within.
func (d *dispatcher) notePeak() {
	if int64(d.sched.waiting+len(d.p.work)) <= d.p.stats.peakWaiting.Load() {
		return // no more than the peak, even if the whole buffer waits
	}
	n := d.sched.waiting + d.buffered()
	if bound := d.cfg().maxWaiting; bound > 0 {
		n = min(n, bound)
	}
	d.p.stats.peakAtLeast(n)
}

func (d *dispatcher) setState(s State) { d.p.stats.state.Store(int32(s)) }

// publishWorkers lets Status see the crew.
func (d *dispatcher) publishWorkers() { d.p.stats.reg.Store(d.crew.registry()) }
