package workerpool

import (
	"math"
	"runtime"
	"time"

	"github.com/dispatchkit/workerpool/internal/handoff"
	"github.com/gammazero/deque"
)

// The loop: the pool's one dispatcher goroutine, which owns every field of
// loop: nothing else reads or writes them, so none needs a lock. What
// others may see it publishes in state.stats.
//
// It receives, asks the scheduler, and acts. It receives submissions and
// requests, and the workers' signals; it asks the scheduler where a task
// goes and which goes next; and it acts: it gives tasks to the hand-off,
// starts workers, takes tasks back, and answers requests.
//
// Between the loop and the workers there are these words, each with one
// meaning:
//  1. the hand-off: the one type between the loop's decision that a task
//     goes to a worker and that worker's start (internal/handoff).
//  2. giving: the loop hands a task to the hand-off, which puts it with a
//     parked worker, a new worker, or the outbox.
//  3. the outbox: the tasks given and not yet taken by a worker, which the
//     next worker to come free takes without waiting for the loop. It
//     holds tasks only while no worker is parked.
//  4. a parked worker: one that found the outbox empty and waits in the
//     hand-off for a task: a free worker.
//  5. taking back: the loop removes tasks from the outbox that no worker
//     has started, to put them back in the scheduler or drop them.
//  6. next: a worker's call for its next task, which reports the end of
//     its last.
//  7. an end: a worker reports that a task ended whose end the scheduler
//     must hear of (a sub-pool's, or a keyed one).
//  8. listening: before it waits, the loop tells the hand-off what it
//     waits to hear of (an end, a parked worker, room in the outbox, no
//     task running), and the hand-off signals it once.
//  9. the crew: the workers' records, which Status sums.
//  10. lending: a worker whose task waits on its own pool (a stop from
//     inside) lends its place while it waits: it counts against neither
//     the maximum nor its sub-pool's limit, so another worker can run the
//     queue.
//
// The common case has a path of its own: while nothing waits in the
// scheduler, no task runs whose end the scheduler must hear of, and no
// request is under way, the loop is quiet: it does a plain receive,
// cheaper than a select, and gives each task as it comes.
type loop struct {
	s     *state
	h     *handoff.Handoff[entry]
	sched *scheduler
	max   int // the maximum of workers (Resize changes it)
	depth int // the most tasks the outbox holds

	// quiet says that the loop may do a plain receive (see calm). The
	// loop clears it whenever that may have changed, and sets it only
	// once it has checked.
	quiet bool

	// seq numbers the tasks accepted; handed counts the tasks given, less
	// those taken back: with those waiting in the scheduler, the tasks in
	// hand that Status counts (see stats.inHand).
	seq, handed uint64
	// outQueue is the queue of every task in the outbox, if outMixed is
	// unset: the loop gave it only that queue's tasks since it last took
	// everything back.
	outQueue *queue
	outMixed bool
	unplaced int // tasks accepted in a row that had to wait; see letWorkersRun

	// Lending. lent is how many places workers that wait on the pool lend
	// now, at most the maximum; stoppers counts the workers that called
	// Stop, StopWait or Shutdown, leavers those of them that did so as they
	// exited, holding no place, and waiters the workers that wait on the
	// pool otherwise: the loop waits for none of them to exit. loans is
	// what each waiter lent, by its goroutine's number; lentTasks holds
	// the seqs of the stoppers' tasks whose sub-pool places are lent until
	// they end.
	lent, stoppers, leavers, waiters int
	loans                            map[uint64]loan
	lentTasks                        map[uint64]bool
	stopperIDs                       map[uint64]bool
	goid                             uint64 // the loop's goroutine, once asked (see loopID)

	back    []entry // scratch for take-backs
	ends    []entry // scratch for ends
	stops   []*request
	dropped []entry // the tasks a stop dropped, for Stop to return

	paused   bool
	pauseEnd <-chan struct{} // Done of the current pause's context
	pauseAck chan struct{}   // closed once no task runs in the current pause; nil once closed
	pauses   deque.Deque[*request]

	// Rates. rated says that a rate was set, so that the loop tells the
	// scheduler the time; pacer is the one timer that wakes the loop when
	// a rate holds a task back, its channel paceC while it is set, for
	// paceAt; pacedLanes the lanes whose count of paced tasks was last
	// published above 0, and pacedShown says the pool's was.
	rated      bool
	pacedShown bool
	pacer      *time.Timer
	paceC      <-chan time.Time
	paceAt     int64
	pacedLanes []*lane

	closed    bool              // Stop, StopWait or Shutdown was called: accept nothing more (as state.closed)
	dropping  bool              // Stop or a passed deadline dropped the queue: drop what comes
	down      bool              // the loop has handed out everything and closed the hand-off
	deadlines []<-chan struct{} // the Shutdown contexts' Done channels
}

// A loan is what a worker that waits on the pool lent: a place under the
// maximum, and its task's place under its sub-pool's limit (task set).
type loan struct {
	place bool
	task  *entry
}

// run is the loop's goroutine. It returns, closing done, once the pool is
// stopped, every task it accepted has ended or been dropped, and every
// goroutine it started has exited but the stoppers.
func (d *loop) run() {
	for {
		if d.quiet {
			// Nothing to hand out and nothing to hear of but submissions:
			// a plain receive will do. Requests come on tasks too.
			d.receive(<-d.s.tasks)
			continue
		}
		d.settle()
		if d.finished() {
			break
		}
		if d.quiet = d.calm(); d.quiet {
			continue
		}
		if d.listen() {
			continue // what it would wait for has happened
		}
		checkLoop(d)
		d.wait()
	}
	d.windDown()
}

// wait waits for what the loop can use: a submission or a request, the
// end of a pause, or a signal of the hand-off.
func (d *loop) wait() {
	s := d.s
	// Receive submissions only while the queue has room, so that Block
	// submitters wait in their send while a bounded queue is full.
	// Meanwhile requests come on control: a select locks every channel it
	// watches, and tasks is the most contended of all.
	var tasks <-chan message
	var control <-chan *request
	var reject chan<- struct{}
	switch {
	case d.receiving():
		tasks = s.tasks
	case !d.closed:
		control, reject = s.control, s.reject
	default:
		control = s.control
	}
	select {
	case m := <-tasks:
		d.receive(m)
	case reject <- struct{}{}:
		// A submitter that does not wait learned that the queue is full;
		// it counts the outcome itself.
	case r := <-control:
		d.handle(r)
	case <-d.pauseEnd:
		d.endPause()
	case <-s.wake:
		// The hand-off signalled what the loop listened for; settle looks.
	case <-d.paceC:
		// A rate holds a token for a task it held back; settle hands it out.
		d.paceC = nil
	}
}

// settle brings the loop up to date before it waits: it takes the ends
// the workers reported, drops the queue if a Shutdown deadline has passed
// or nothing left can start, answers what waits for running tasks, and
// hands out what may go.
func (d *loop) settle() {
	d.collect()
	if len(d.deadlines) > 0 {
		d.checkDeadline()
	}
	if d.closed {
		d.checkStranded()
	}
	if d.pauseAck != nil {
		d.checkPauseAck()
	}
	if len(d.stops) > 0 {
		d.answerStops()
	}
	d.fill()
	if d.rated {
		d.pace()
	}
}

// calm reports whether the loop may go quiet: nothing waits to be handed
// out, no task is out whose end the scheduler must hear of (a key, a
// sub-pool's place: a key costs memory only while its tasks wait or run),
// and nothing else is under way but tasks.
func (d *loop) calm() bool {
	return d.sched.Waiting() == 0 && d.sched.Reported() == 0 && !d.closed && !d.paused &&
		d.pauseAck == nil && len(d.stops) == 0 && d.room() && !d.sched.PoolRated()
}

// listen tells the hand-off what the loop waits to hear of from the
// workers, and reports whether it has happened already.
func (d *loop) listen() bool {
	var w handoff.Want
	roomAt, idleAt := -1, 0
	if d.sched.Reported() > 0 {
		w |= handoff.WantEnds // a key or a place to free, a sub-pool's stop to answer
	}
	if d.pauseAck != nil {
		w |= handoff.WantIdle // no task may run for the pause to hold
	}
	if d.closed && d.waitingOnPool() > 0 && d.sched.Stuck() && d.s.onWay.empty() {
		// A queue that only tasks waiting on the pool hold back is
		// stranded: the loop looks again once the outbox is empty and no
		// other task runs (see checkStranded).
		if d.h.Len() > 0 {
			w |= handoff.WantRoom
			roomAt = max(roomAt, 0)
		} else {
			w |= handoff.WantIdle
			idleAt = d.waitingOnPool()
		}
	}
	if d.closed && d.sched.Waiting() == 0 && d.s.onWay.empty() {
		// Finished once the workers have emptied the outbox (see
		// finished): Listen looks at it under the hand-off's lock, so an
		// outbox emptied since finished looked is not missed.
		w |= handoff.WantRoom
		roomAt = max(roomAt, 0)
	}
	if bound := d.s.cfg.maxWaiting; bound > 0 && !d.room() {
		w |= handoff.WantRoom // a bounded queue waits for a task to leave the outbox
		roomAt = bound - d.sched.Waiting() - 1
	}
	if !d.paused && !d.dropping {
		if e, ok := d.sched.Peek(); ok {
			if d.sched.MayBuffer(e.Queue) {
				w |= handoff.WantRoom // the outbox is full: refill it once half is taken
				roomAt = max(roomAt, d.depth/2)
			} else {
				w |= handoff.WantPark // a direct task waits for a free worker
			}
		}
	}
	return d.h.Listen(w, roomAt, idleAt)
}

// waitingOnPool returns how many running tasks wait on the pool: those of
// the stoppers, but those that stopped as they exited, and of the other
// workers that wait on it.
func (d *loop) waitingOnPool() int { return d.stoppers - d.leavers + d.waiters }

// finished reports whether the loop is done: the pool is stopping, no task
// waits, in the scheduler or the outbox, and no submitter is on its way
// (none that passed its check of state.closed is still to hand over). The
// loop waits for the workers to empty the outbox, as a request (a Resize,
// a rate) may take its tasks back into the scheduler, which only the loop
// hands out.
func (d *loop) finished() bool {
	return d.closed && d.sched.Waiting() == 0 && d.s.onWay.empty() && d.h.Len() == 0
}

// receiving reports whether the loop receives on state.tasks: while the
// queue has room, and once closed only from the submitters that passed
// their check of state.closed before it was set.
func (d *loop) receiving() bool {
	return d.room() && (!d.closed || d.s.cfg.maxWaiting == 0)
}

// receive takes m, a submission or a request, then whatever else is
// already waiting on state.tasks, without going round the loop for each,
// and publishes the tasks in hand once.
func (d *loop) receive(m message) {
	for n := 1; ; n++ {
		if m.req != nil {
			d.handle(m.req)
		} else {
			d.accept(m)
		}
		if n == 64 || !d.quiet && !d.receiving() { // quiet: it receives
			break
		}
		select {
		case m = <-d.s.tasks:
			continue
		default:
		}
		break
	}
	d.publishInHand()
}

// accept takes a submitted task: to the hand-off at once if it may start
// and nothing waits, else into the scheduler.
func (d *loop) accept(m message) {
	// Submitted before the task can start, so that no Status sees it
	// Completed and not Submitted.
	d.seq++
	d.s.stats.submitted.Store(d.seq)
	var accepted int64 // when, for its timing: 0 if the pool does not time its tasks
	if d.s.cfg.timings {
		accepted = d.s.now()
	}
	if m.lane == nil && !m.keyed && m.level == 0 && d.quiet {
		// The common case, kept short: a task of the pool's own queue
		// while nothing waits. While the loop is quiet the outbox holds
		// only the pool's own unkeyed tasks, so this one may follow them
		// without a turn, and without the scheduler counting it started:
		// should it come back, it goes before every task accepted after
		// it, which is where turn 0 puts it.
		e := entry{Task: m.task, Queue: d.s.own, Seq: d.seq, Accepted: accepted}
		if e.W != nil {
			noteSpot(e) // a Call's or a Group's: its submitter may give up
		}
		if d.give(e, false) {
			if d.s.cfg.maxWaiting > 0 {
				d.quiet = d.room() // the outbox may hold all that may wait
			}
			return
		}
		d.quiet = false
		d.waitOrDrop(e)
		return
	}
	q := d.s.own
	if m.lane != nil {
		q = m.lane.queue
		m.lane.stats.submitted.Add(1)
	}
	if d.rated {
		d.clock(q)
	}
	d.collect() // ends that free the task's place or key
	e := d.sched.Admit(m.task, q, m.key, m.keyed, m.level, d.seq, accepted)
	if e.W != nil {
		noteSpot(e)
	}
	if e.Level > 0 && !d.dropping {
		d.makeWay(e)
	}
	if !d.dropping && !d.paused && d.sched.StartsNow(e) && d.outboxAllOf(e.Queue) {
		e.Turn = d.sched.NextTurn(e.Queue)
		if d.give(e, e.Tokens != 0) { // a paced task starts as it takes its token
			d.sched.Start(e)
			d.publishLane(e.Queue)
			d.quiet = d.quiet && !e.Reported() && d.room() // the loop hears of its end
			return
		}
	}
	d.quiet = false
	d.waitOrDrop(e)
}

// waitOrDrop puts e, which may not start now, into the scheduler, or drops
// it if a stop dropped the queue: a submitter on its way handed it over
// since. If e's queue had no task waiting and the outbox may hold other
// queues' tasks, they come back first, so that e's queue takes its turn
// after one of theirs, not after every one given ahead.
func (d *loop) waitOrDrop(e entry) {
	if d.dropping {
		d.drop(e)
		return
	}
	if e.Queue.Waiting() == 0 && !d.outboxAllOf(e.Queue) {
		d.takeBack(nil)
	}
	d.sched.Wait(e)
	d.publishLane(e.Queue)
	d.noteWaiting(e.Queue)
	d.letWorkersRun()
}

// outboxAllOf reports whether every task in the outbox is of queue q: then
// a task of q may follow them there without waiting for a turn, which
// would come after them anyway. Else it waits in the scheduler, so that
// the queues take turns.
func (d *loop) outboxAllOf(q *queue) bool {
	if !d.outMixed && (d.outQueue == nil || d.outQueue == q) {
		return true
	}
	if d.h.Len() > 0 {
		return false
	}
	d.outQueue, d.outMixed = nil, false // the workers emptied it
	return true
}

// fill hands out waiting tasks, in turn order, as many as may go.
func (d *loop) fill() {
	if len(d.deadlines) > 0 {
		d.checkDeadline() // no queued task starts once a deadline has passed
	}
	if d.paused || d.dropping || d.sched.Waiting() == 0 {
		return
	}
	if d.rated {
		d.clock(nil) // a rate may have a token now
	}
	if turn, ok := d.sched.Rejoined(); ok {
		// A queue passed over took its place back: what was handed out
		// after its turn comes back, to go after it.
		d.takeBack(func(e entry) bool { return turn.Before(e.Turn) })
	}
	did := false
	for {
		e, ok := d.sched.Peek()
		if !ok || !d.give(e, !d.sched.MayBuffer(e.Queue)) {
			break
		}
		d.sched.Take()
		d.publishLane(e.Queue)
		did = true
	}
	if did {
		d.unplaced = 0
		d.publishInHand()
	}
}

// give gives e, a task that may start, to the hand-off, and reports
// whether it took it. A direct task goes only to a worker free to start
// it at once: the tasks of a queue whose busy key holds a task back, so
// that once its key is free that task finds none of its queue handed out
// before it.
func (d *loop) give(e entry, direct bool) bool {
	switch d.h.Give(e, direct) {
	case handoff.Full:
		return false
	case handoff.Start:
		d.startWorker(e, withTask)
	case handoff.Outbox:
		if d.outQueue != e.Queue {
			d.outMixed = d.outMixed || d.outQueue != nil
			d.outQueue = e.Queue
		}
	}
	d.handed++
	if l := d.s.laneOf(&e); l != nil {
		l.handed++
	}
	return true
}

// startWorker starts a worker, with e as its first task if how is
// withTask, counted busy before the worker runs: Status shows it at once.
// If e's submitter gave up on it, the worker starts idle, having skipped
// it, as a worker that receives such a task does.
func (d *loop) startWorker(e entry, how start) {
	w := new(worker)
	if how == withTask {
		l := laneOf(&e)
		if e.W != nil && !e.W.take() {
			d.s.skip(w, &e, l)
			how = skipped // it reports the task's end first, as after a task
		} else {
			w.phase.Store(1)
			if l != nil {
				l.stats.started.Add(1)
			}
		}
	}
	d.s.crew.join(w)
	if d.h.NeedsClock() {
		d.s.live.Add(1)
		go d.s.reapClock()
	}
	d.s.startWorker(w, e, how)
}

// takeBack takes back from the outbox the first task that from selects
// (nil: the first of all) and every task behind it, and puts them back in
// the scheduler, in order, with the turns they took, to be handed out
// again: so each queue's tasks out stay the first it accepted, and the
// turns keep their order.
func (d *loop) takeBack(from func(entry) bool) {
	back := d.h.TakeBack(from, d.back[:0])
	if from == nil {
		d.outQueue, d.outMixed = nil, false
	}
	if len(back) > 0 {
		d.handed -= uint64(len(back))
		d.sched.PutBack(back)
		for _, e := range back {
			if l := laneOf(&e); l != nil {
				l.handed--
			}
			d.publishLane(e.Queue)
		}
		d.publishInHand()
	}
	clear(back)
	d.back = back[:0]
}

// collect takes the ends the workers reported and tells the scheduler, and
// reports whether there were any.
func (d *loop) collect() bool {
	ends := d.h.Ends(d.ends)
	for _, e := range ends {
		if d.lentTasks[e.Seq] {
			// A stopper's task: its place was lent until now.
			delete(d.lentTasks, e.Seq)
			d.sched.Reclaim(e)
		}
		d.sched.Ended(e)
	}
	clear(ends)
	d.ends = ends[:0]
	if cap(ends) > maxReuse {
		d.ends = nil // a burst of ends: let it go
	}
	return len(ends) > 0
}

// maxReuse is the most ends whose slice the loop keeps for reuse.
const maxReuse = 256

// letWorkersRun yields once 64 tasks in a row had to wait, if the pool
// runs on one P. Each task readies a worker and then the next submitter,
// and the runtime runs the goroutine readied last first, so on one P the
// loop and busy submitters can keep the workers waiting in the run queue
// indefinitely, while tasks pile up. With more Ps, idle ones steal the
// workers, and a yield would only put the loop behind them all.
func (d *loop) letWorkersRun() {
	if d.unplaced++; d.unplaced < 64 {
		return
	}
	d.unplaced = 0
	if runtime.GOMAXPROCS(0) == 1 {
		runtime.Gosched()
	}
}

// room reports whether one more task may wait: the scheduler and the
// outbox together hold fewer than the bound.
func (d *loop) room() bool {
	bound := d.s.cfg.maxWaiting
	return bound == 0 || d.sched.Waiting()+d.h.Len() < bound
}

// setMax applies the maximum, with the places lent beside it, to the
// scheduler and the hand-off, and starts workers for the tasks in the
// outbox if it rose. The sum saturates: lent places never make the
// maximum wrap around.
func (d *loop) setMax() {
	n := d.max
	if d.lent > math.MaxInt-n {
		n = math.MaxInt
	} else {
		n += d.lent
	}
	d.sched.SetMax(n)
	for range d.h.SetMax(n) {
		d.startWorker(entry{}, idle)
	}
}

// publishInHand publishes the tasks in hand (see stats.inHand), having
// recorded the peak of those waiting: only between moves, once a task
// handed out has left the scheduler's count, so that Status never counts
// one twice.
func (d *loop) publishInHand() {
	waiting := 0 // while quiet, nothing waits in the scheduler
	if !d.quiet {
		waiting = d.sched.Waiting()
	}
	d.notePeak(waiting)
	d.s.stats.inHand.Store(uint64(waiting) + d.handed)
}

// publishLane publishes what a sub-pool's queue holds, for its Status: the
// tasks waiting in it, and those handed out of it, less those taken back.
func (d *loop) publishLane(q *queue) {
	if l, ok := q.Owner.(*lane); ok {
		l.stats.inHand.Store(uint64(q.Waiting()) + l.handed)
	}
}

// noteWaiting records that a task of queue q waits: q's sub-pool may have
// a new peak of waiting tasks.
func (d *loop) noteWaiting(q *queue) {
	if l, ok := q.Owner.(*lane); ok {
		raise(&l.stats.peakWaiting, int64(l.waiting(d.s.cfg.maxWaiting)))
	}
}

// notePeak records the tasks waiting, the scheduler's (waiting) and those
// in the outbox, as PeakWaiting if they are more. The outbox is read only
// when the scheduler's tasks with a full outbox would pass the peak.
func (d *loop) notePeak(waiting int) {
	if int64(waiting+d.depth) <= d.s.stats.peakWaiting.Load() {
		return
	}
	n := waiting + d.h.Len()
	if bound := d.s.cfg.maxWaiting; bound > 0 {
		n = min(n, bound)
	}
	d.s.stats.peakAtLeast(n)
}

func (d *loop) setState(s State) { d.s.stats.state.Store(int32(s)) }
