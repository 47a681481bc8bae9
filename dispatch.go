package workerpool

import (
	"runtime"

	"github.com/gammazero/deque"
)

// The loop: the pool's one dispatcher goroutine, which owns every field of
// dispatcher: nothing else reads or writes them, so none needs a lock. What
// others may see it publishes in Pool.stats.
//
// It receives, asks the scheduler, and acts. It receives submissions and
// requests, and the workers' signals; it asks the scheduler where a task
// goes and which goes next; and it acts: it hands tasks to workers, starts
// workers, takes hand-offs back, and answers requests.
//
// Between the loop and the workers there are these ten words, each with
// one meaning:
//  1. a hand-off: a task sent on Pool.work, in a slot of a ring, with the
//     send's number; a worker claims it, or the loop revokes it
//     (handoff.go).
//  2. a quit: a hand-off with no slot, which the loop has counted out: the
//     worker exits. A stop, the reaping clock and a Resize that lowers the
//     maximum (to parked workers) send quits.
//  3. a retirement: a hand-off with no slot that a worker counts itself
//     out for, if the maximum has not risen again: Resize sends them when
//     it lowers the maximum, ahead of any task.
//  4. the buffer: Pool.work's capacity, where hand-offs wait for the next
//     worker to come free. The loop fills it in turn order; when it is
//     full, the loop offers the next hand-off to it in its select.
//  5. a recall: revoking pending hand-offs and putting their tasks back,
//     in order, to be handed out again: for a pause, a resize, a new
//     queue's turn, a queue's place freed by a task's end, a stopper.
//  6. a free worker: one that has finished its task, reported its end if
//     it must, and is not in the panic handler or the task observer. A
//     direct hand-off goes only to a free worker: the tasks of a queue
//     whose busy key holds a task back, and every task while a Shutdown
//     deadline is watched.
//  7. a report: a worker tells the loop that a sub-pool's or a keyed task
//     ended, or that it skipped a task given up, so that its place and its
//     key are free again (task.go).
//  8. listening: the loop waits for the workers; they signal it (on
//     Pool.wake) when they claim a hand-off or end a task.
//  9. the record of a worker: the tasks it finished, whether it is busy,
//     and when it went idle, which the reaping clock reads (reap.go).
//  10. a stopper: a worker whose task (or a hook of it, or a Local's
//     close) called Stop, StopWait or Shutdown. It no longer counts
//     against the maximum, and the loop does not wait for it to exit. A
//     queue that only stoppers' tasks hold back is stranded: dropped.
//
// The common case has a path of its own: while nothing waits in the
// scheduler and no request is under way, the loop is quiet: it does a
// plain receive, cheaper than a select, and hands each task out as it
// comes (receive, accept, handOut).
type dispatcher struct {
	p     *Pool
	sched *scheduler
	max   int      // the current maximum of workers (Resize changes it)
	out   handOffs // the hand-offs sent on Pool.work
	crew  crew     // the workers, for reaping and Status
	clock reapClock

	// quiet says that the loop may do a plain receive: nothing waits in
	// the scheduler, no request is under way and the queue has room. The
	// loop clears it whenever that may have changed, and sets it only
	// once it has checked (see calm).
	quiet bool
	// listening mirrors Pool.listening.
	listening bool
	// stoppers counts the workers that called Stop, StopWait or Shutdown
	// themselves: the loop neither counts them against the maximum nor
	// waits for them to exit. leavers counts those of them that called as
	// they left, already counted out of the maximum.
	stoppers, leavers int
	// subWaiters counts the workers that wait in a sub-pool's Stop or
	// StopWait, in stops, and subLeavers those of them that are leaving:
	// the loop does not wait for them to exit.
	subWaiters, subLeavers int

	// handed counts the tasks handed to workers, less those revoked, and
	// quits the quits: together, what workers received or will.
	handed, quits uint64
	// owedRetires counts the retirements a Resize lowering the maximum has
	// yet to send: the buffer was full.
	owedRetires int
	submitted   uint64 // tasks accepted; published as stats.submitted
	unplaced    int    // tasks accepted in a row that had to wait; see letWorkersRun

	back    []entry  // revoke's scratch
	turns   []int64  // and the turns of what it took back
	got     []report // reports taken from Pool.reports, reused
	stops   []*request
	dropped []entry // the tasks Stop or a Shutdown deadline dropped, for Stop to return

	paused   bool
	pauseEnd <-chan struct{} // Done of the current pause's context
	pauseAck chan struct{}   // closed once no task runs in the current pause; nil once closed
	pauses   deque.Deque[*request]

	closed    bool              // Stop, StopWait or Shutdown was called: accept nothing more (as Pool.closed)
	dropping  bool              // Stop or a passed deadline dropped the queue: drop what comes
	down      bool              // the loop has ended and Pool.work is closed
	deadlines []<-chan struct{} // the Shutdown contexts' Done channels
}

// run is the dispatcher goroutine. It returns, closing p.done, once the pool
// is stopped, every task it accepted has ended or been dropped, and every
// goroutine it started has exited.
func (d *dispatcher) run(started chan<- struct{}) {
	p := d.p
	p.dispatcherID.Store(goroutineID())
	for range p.cfg.minWorkers {
		d.start(entry{lane: &d.sched.own}, false)
	}
	close(started)
	for {
		if d.quiet {
			// Nothing to hand out and nothing to watch but submissions: a
			// plain receive will do. Requests come on p.tasks too.
			d.receive(<-p.tasks)
			continue
		}
		d.settle()
		if d.finished() {
			break
		}
		if d.quiet = d.calm(); d.quiet {
			continue
		}
		if d.listen(d.waitsForWorkers()) {
			// A worker may have done something before it could see
			// listening, and not told: look at everything again, whether
			// the loop is finished included.
			continue
		}
		checkLoop(d)
		d.wait()
	}
	d.listen(true)
	d.windDown()
}

// wait waits for what the loop can use: a submission or a request, room
// in the buffer for the next hand-off, the end of a pause, or a worker's
// signal.
func (d *dispatcher) wait() {
	p := d.p
	// Receive submissions only while the queue has room, so that Block
	// submitters wait in their send while a bounded queue is full.
	// Meanwhile requests come on p.control: a select locks every channel
	// it watches, and p.tasks is the most contended of all.
	var tasks <-chan message
	var control <-chan *request
	var reject chan<- struct{}
	switch {
	case d.receiving():
		tasks = p.tasks
	case !d.closed:
		control, reject = p.control, p.reject
	default:
		control = p.control
	}
	var work chan<- handOff
	next, offered := d.offer()
	if offered {
		work = p.work
	}
	// The select only learns what happened; the loop acts after it, once
	// the offer, if it was not taken, is undone: acting may ready another.
	var m message
	var r *request
	var what waitResult
	select {
	case m = <-tasks:
		what = gotMessage
	case reject <- struct{}{}:
		// A submitter that does not wait learned that the queue is full;
		// it counts the outcome itself.
		what = toldFull
	case work <- next:
		// A worker took a hand-off from the full buffer: the next went in.
		what = offerTaken
	case r = <-control:
		what = gotRequest
	case <-d.pauseEnd:
		what = pauseEnded
	case <-p.wake:
		// A worker did something the loop listens for; settle looks.
		what = signalled
	}
	if offered && what != offerTaken {
		d.out.unprepare()
	}
	switch what {
	case gotMessage:
		d.receive(m)
	case offerTaken:
		d.sentOffer(next)
	case gotRequest:
		d.handle(r)
	case pauseEnded:
		d.endPause()
	case toldFull, signalled:
	}
}

// A waitResult says which of wait's cases the select took.
type waitResult uint8

const (
	gotMessage waitResult = iota
	toldFull
	offerTaken
	gotRequest
	pauseEnded
	signalled
)

// settle brings the loop up to date before it waits: it takes the
// workers' reports, drops the queue if a Shutdown deadline has passed,
// answers what waits for running tasks, and hands out what may go. It
// reports whether it did anything.
func (d *dispatcher) settle() bool {
	did := d.collect()
	did = d.checkDeadline() || did
	did = d.checkStranded() || did
	did = d.checkPauseAck() || did
	did = d.answerStops() || did
	did = d.sendRetirements() || did
	return d.fill() || did
}

// calm reports whether the loop may go quiet: nothing waits to be handed
// out, no task is out whose end the scheduler must hear of (a key, a
// sub-pool's place: a key costs memory only while its tasks wait or run),
// and nothing else is under way but tasks.
func (d *dispatcher) calm() bool {
	return d.sched.waiting == 0 && d.sched.reported == 0 && !d.closed && !d.paused && d.pauseAck == nil &&
		len(d.stops) == 0 && d.owedRetires == 0 && d.room()
}

// waitsForWorkers reports whether the loop waits for something only a
// worker can tell it: a task that ends (for a pause, a stop, a report, a
// free worker), or a hand-off that is claimed (for room in a bounded
// queue, or to finish). A full buffer needs no signal: the loop offers it
// the next hand-off.
func (d *dispatcher) waitsForWorkers() bool {
	if d.pauseAck != nil || len(d.stops) > 0 || d.closed || d.owedRetires > 0 || d.sched.reported > 0 {
		return true
	}
	if d.paused || d.sched.waiting == 0 {
		return !d.room() // duds in the buffer hold its room
	}
	_, offering := d.offerable()
	return !offering
}

// listen sets Pool.listening to on, if it is not already, and reports
// whether it was off and is now on: then the loop looks again.
func (d *dispatcher) listen(on bool) bool {
	if on == d.listening {
		return false
	}
	d.listening = on
	d.p.listening.Store(on)
	return on
}

// finished reports whether the loop is done: the pool is stopping, no task
// waits, every hand-off is claimed or revoked, and no submitter is on its
// way (none that passed its check of Pool.closed is still to hand over).
func (d *dispatcher) finished() bool {
	return d.closed && d.sched.waiting == 0 && d.out.resolved() && d.p.onWay.empty()
}

// receiving reports whether the loop receives on p.tasks: while the queue
// has room, and once closed only from the submitters that passed their
// check of p.closed before it was set.
func (d *dispatcher) receiving() bool {
	return d.room() && (!d.closed || d.cfg().maxWaiting == 0)
}

// receive takes m, a submission or a request, then whatever else is
// already waiting on p.tasks, without going round the loop for each, and
// publishes the tasks in hand once.
func (d *dispatcher) receive(m message) {
	for n := 1; ; n++ {
		if m.req != nil {
			d.handle(m.req)
		} else {
			d.accept(m)
		}
		if n == 64 || !d.receiving() {
			break
		}
		select {
		case m = <-d.p.tasks:
			continue
		default:
		}
		break
	}
	d.publishInHand()
}

// accept takes a submitted task: to a worker at once if it may start and
// nothing waits, else into the scheduler.
func (d *dispatcher) accept(m message) {
	// Submitted before the task can start, so that no Status sees it
	// Completed and not Submitted.
	d.submitted++
	d.p.stats.submitted.Store(d.submitted)
	if m.sub == nil && !m.keyed && d.quiet {
		// The common case, kept short: a task of the pool's own queue
		// while nothing waits.
		e := entry{task: m.task, lane: &d.sched.own, seq: d.sched.nextSeq(), accepted: d.acceptedNow()}
		if e.w != nil {
			noteSpot(e) // a Call's or a Group's: its submitter may give up
		}
		if d.out.allOf(e.lane) && d.handOut(e, d.sched.nextTurn()) {
			d.sched.start(e)
			if d.cfg().maxWaiting > 0 && !d.room() {
				d.quiet = false // the buffer holds all that may wait
			}
			return
		}
		d.quiet = false
		d.waitOrDrop(e)
		return
	}
	var l *lane
	if m.sub != nil {
		l = m.sub.lane
		m.sub.stats.submitted.Add(1)
	}
	d.collect() // ends that free the task's place or key
	e := d.sched.admit(m.task, l, m.key, m.keyed, d.acceptedNow())
	if e.w != nil {
		noteSpot(e)
	}
	if !d.dropping && !d.paused && d.sched.startsNow(e) && d.out.allOf(e.lane) && d.mayBuffer(e.lane) && d.handOut(e, d.sched.nextTurn()) {
		d.sched.start(e)
		d.publishLane(e.lane)
		if d.cfg().maxWaiting > 0 && !d.room() {
			d.quiet = false
		}
		return
	}
	d.quiet = false
	d.waitOrDrop(e)
}

// waitOrDrop puts e, which may not start now, into the scheduler, or drops
// it if Stop dropped the queue: a submitter on its way handed it over
// since. If e's lane had no task waiting and the buffer holds other
// lanes' hand-offs, they come back first, so that e's lane takes its turn
// after theirs, not after every one handed out ahead.
func (d *dispatcher) waitOrDrop(e entry) {
	if d.dropping {
		d.drop(e)
		return
	}
	if e.lane.waiting == 0 && !d.out.allOf(e.lane) {
		d.recall(0)
	}
	d.sched.wait(e)
	d.publishLane(e.lane)
	d.noteWaiting(e.lane)
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

// fill hands out waiting tasks, in turn order, as many as may go, and
// reports whether it handed out any.
func (d *dispatcher) fill() bool {
	if d.paused || d.dropping || d.sched.waiting == 0 {
		return false
	}
	if d.deadlines != nil && d.checkDeadline() {
		return true // no queued task starts once a deadline has passed
	}
	if d.sched.rejoined {
		// A lane passed over took its place back: what was handed out
		// after its turn comes back, to go after it.
		d.sched.rejoined = false
		d.recallAfter(d.sched.lowJoin)
	}
	free := -1 // free workers, counted once if a direct hand-off needs it
	did := false
	for {
		e, ok := d.sched.peek()
		if !ok {
			break
		}
		direct := !d.mayBuffer(e.lane)
		if direct && d.working() >= d.max {
			if len(d.p.work) > 0 {
				break // a free worker would take what the buffer holds first
			}
			if free < 0 {
				// Count the free workers, then take the reports: a worker
				// counted free has reported the end of its task, which may
				// free a key whose task goes before this one.
				free = d.freeWorkers()
				if d.collect() {
					continue
				}
			}
			if free == 0 {
				break
			}
			free--
		}
		if !d.handOut(e, e.lane.turn) {
			break
		}
		d.sched.take()
		did = true
	}
	if did {
		d.unplaced = 0
		d.publishInHand()
	}
	return did
}

// mayBuffer reports whether a task of lane l may wait in the hand-off
// buffer: not while a busy key holds back a task of l, nor while a
// Shutdown deadline is watched, so that no task waits where a worker could
// take it once the deadline has passed.
func (d *dispatcher) mayBuffer(l *lane) bool {
	return d.deadlines == nil && d.sched.mayBuffer(l)
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

// subpoolOf returns the sub-pool of lane l, or nil for the pool's own (or
// none: a task that CallerRuns runs in its submitter has no lane).
func subpoolOf(l *lane) *Subpool {
	if l == nil {
		return nil
	}
	s, _ := l.owner.(*Subpool)
	return s
}

// room reports whether one more task may wait: the lanes and the hand-off
// buffer together hold fewer than the bound.
func (d *dispatcher) room() bool {
	bound := d.cfg().maxWaiting
	return bound == 0 || d.sched.waiting+d.buffered() < bound
}

// buffered returns how many tasks may wait in the hand-off buffer: at most
// what it holds, less the revoked hand-offs that wait there for a worker
// to drop them, and at most the hand-offs pending.
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

// working returns how many workers count against the maximum: all of
// them but the stoppers, which wait for the pool to stop.
func (d *dispatcher) working() int { return d.workers() - (d.stoppers - d.leavers) }

// setMax sets the maximum of workers to n. The stoppers run beside them,
// so a lane's limit holds nothing back only at or above n plus them, and
// a worker retires only above that many.
func (d *dispatcher) setMax(n int) {
	d.max = n
	above := n + d.stoppers - d.leavers
	d.sched.setMax(above)
	d.p.stats.retireAbove.Store(int64(above))
}

// publishInHand publishes the tasks in hand (see stats.inHand), having
// recorded the peak of those waiting: only between moves, once a task
// handed out has left the scheduler's count, so that Status never counts
// one twice.
func (d *dispatcher) publishInHand() {
	d.notePeak()
	d.p.stats.inHand.Store(uint64(d.sched.waiting) + d.handed)
}

// noteWaiting records that a task of lane l waits: l's sub-pool may have a
// new peak of waiting tasks.
func (d *dispatcher) noteWaiting(l *lane) {
	if sub := subpoolOf(l); sub != nil {
		sub.notePeak()
	}
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
