package workerpool

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"sync/atomic"

	"github.com/dispatchkit/workerpool/internal/handoff"
	"github.com/dispatchkit/workerpool/internal/sched"
)

// state is what the API, the loop and the workers share: the channels
// between them, the hand-off, the flags a stop sets and the counters
// Status reads. A Pool holds it; nothing in it refers to the Pool, so that
// a pool its user dropped can be collected (see New).
type state struct {
	cfg config // fixed at New

	// tasks carries submissions and requests to the loop. It is
	// unbuffered, so that a task is accepted exactly when the loop takes
	// it; the loop receives only while it can place the task, so that
	// Block submitters wait in their send while a bounded queue is full.
	tasks chan message
	// reject is sent on by the loop, only while the bounded queue is full,
	// to tell submitters that do not wait to give up.
	reject chan struct{}
	// control carries requests to the loop while it does not receive on
	// tasks.
	control chan *request
	// hand carries tasks from the loop to the workers, and the workers'
	// signals back; wake is its channel to the loop.
	hand *handoff.Handoff[entry]
	wake chan struct{}
	// own is the scheduler's queue of the pool's own tasks: a worker tells
	// them by it, without reading the queue, which the loop writes.
	own *queue

	// closed is set by the loop once the pool accepts no more
	// submissions, just before it closes stopping.
	closed atomic.Bool
	// stopCalled is won by the first Stop, drainCalled by the first
	// StopWait or Shutdown; each then sends its request.
	stopCalled, drainCalled atomic.Bool
	// stopping is closed by the loop once it accepts nothing more;
	// closing once it has handed out everything and tells the workers to
	// exit, so that the reaping clock stops; done as its last act, once
	// every goroutine the pool started has exited but the stoppers (see
	// loop.lend); exited once the stoppers have exited too, by the last
	// goroutine to go, once ended is set.
	stopping, closing, done, exited chan struct{}
	ended, exitedClosed             atomic.Bool

	// live counts the pool's goroutines other than the loop: workers and
	// the reaping clock. Each counts itself out as its last act (gone).
	live atomic.Int64
	// loopID is the number of the loop's goroutine, once a stop from
	// inside asked the loop for it (see caller).
	loopID atomic.Uint64

	// abandoned holds the fire-and-forget tasks that Stop or a Shutdown
	// deadline dropped, in the order the pool accepted them, and dropped
	// says whether any task was dropped, waiters included. The loop writes
	// both before closing done; they are read after it, abandoned by the
	// first caller to win claimed.
	abandoned []func()
	dropped   bool
	claimed   atomic.Bool

	// epoch is when the pool was made: its tasks' timings count from it in
	// nanoseconds; timings sums them up, with WithTaskTimings.
	epoch   time.Time
	timings taskTimings

	// crew lists the workers, for Status and for telling them apart.
	crew crew

	// The fields below are written by submitters and workers as tasks come
	// and go: each on cache lines of its own, apart from the fields above,
	// which every worker and submitter reads for every task.
	_ [cacheLine]byte
	// onWay counts the submitters that found closed unset and have not
	// yet handed their task over (or registered a CallerRuns task): the
	// loop finishes only once there are none, so that every submission it
	// let through is taken.
	onWay onWay

	stats stats
}

// A message is what travels on state.tasks to the loop: a task, with where
// it goes, or a request (req set, and nothing else).
type message struct {
	task
	lane  *lane  // the task's sub-pool's lane; nil for the pool's own queue
	key   string // a keyed task's key
	keyed bool   // the task has a key: key, which may be ""
	level int32  // the task's priority level (see Pool.Priority): 0 or more
	req   *request
}

// A request asks the loop to do something other than take a task. It
// travels on state.tasks, in a message, or on state.control; done, if not
// nil, is closed once the request has taken effect.
type request struct {
	kind     requestKind
	n        int             // resize, subResize: the new maximum or limit
	ctx      context.Context // pause: pause until it is done
	deadline <-chan struct{} // drain: a Shutdown's ctx.Done(), or nil
	lane     *lane           // sub*: the sub-pool's lane
	cancel   []cancelable    // cancel: the tasks their submitters took back
	tasks    []func()        // subStop: the tasks it dropped; written before done closes
	caller   caller          // stopper, lend, reclaim, sub*: who asks
	isWorker bool            // stopper, lend: the loop's answer, written before done closes
	drains   bool            // stopper: the caller's stop runs the queue (StopWait, Shutdown)
	pastCap  bool            // stopper: the loop's answer: the caller must not wait (see loop.lend)
	lentLane *lane           // lend: the lane whose place the worker's task lent, if any
	rate     sched.Rate      // rate: the new rate (none: no limit)
	keys     bool            // rate: the rate is each key's
	done     chan struct{}
}

// A requestKind says what a request asks for.
type requestKind uint8

const (
	pauseRequest     requestKind = iota + 1 // Pause: hold the queue until ctx is done
	resizeRequest                           // Resize: set the maximum to n
	stopRequest                             // Stop: drop the queue, then drain
	drainRequest                            // StopWait or Shutdown: run the queue, accept nothing more
	deadlineRequest                         // a Shutdown's ctx is done: look at the deadlines
	subResizeRequest                        // Subpool.Resize: set its limit to n
	subStopRequest                          // Subpool.Stop: drop its tasks, wait for it to be idle
	subDrainRequest                         // Subpool.StopWait: wait for it to be idle
	cancelRequest                           // remove the cancel tasks from the queue
	stopperRequest                          // a worker calls Stop, StopWait or Shutdown: it lends its place until it exits
	lendRequest                             // a worker waits on the pool: it lends its place
	reclaimRequest                          // the worker's wait ended: it takes its place back
	rateRequest                             // SetRate, SetKeyRate: set the rate of the pool, of lane's queue, or of its keys
)

// request sends r to the loop, unless it has finished. It does not wait
// for r.done.
func (s *state) request(r *request) bool { return s.sendRequest(r, s.done, nil) }

// sendRequest sends r to the loop on state.tasks, where it waits for
// submissions alone, or on state.control, which it receives otherwise. It
// gives up, and returns false, once either of the two channels is closed
// (nil: never).
func (s *state) sendRequest(r *request, giveUp, cancel <-chan struct{}) bool {
	select {
	case s.tasks <- message{req: r}:
	case s.control <- r:
	case <-giveUp:
		return false
	case <-cancel:
		return false
	}
	return true
}

// gone counts a goroutine of the pool out, as its last act, and tells the
// loop, which may be waiting for it. The last to go, once the loop has
// ended, closes exited: the pool is stopped.
func (s *state) gone() {
	if s.live.Add(-1) == 0 && s.ended.Load() {
		s.closeExited()
	}
	s.hand.Signal()
}

// closeExited closes state.exited, once: every goroutine the pool started
// has exited, the loop's included.
func (s *state) closeExited() {
	if s.exitedClosed.CompareAndSwap(false, true) {
		s.stats.state.Store(int32(Stopped))
		close(s.exited)
	}
}

// now returns the pool's clock: the time since it was made, plus one, so
// that 0 can mean "not timed" in entry.Accepted.
func (s *state) now() int64 { return int64(time.Since(s.epoch)) + 1 }

// status returns a snapshot of the pool's state and counters, for
// Pool.Status.
func (s *state) status() Status {
	st := &s.stats
	// Read the panics before the tasks that include them, the tasks before
	// the submissions that include them, and each gauge before its peak, so
	// that every part is at most the whole it belongs to.
	panicked := st.panicked.Load()
	callerRan := st.callerRan.Load()
	inHand := st.inHand.Load()
	c := s.workersAndTasks()
	waiting := s.waiting(inHand, c)
	return Status{
		State:       State(st.state.Load()),
		MaxWorkers:  int(st.maxWorkers.Load()),
		MinWorkers:  s.cfg.minWorkers,
		Workers:     c.workers,
		Busy:        c.busy,
		Idle:        c.workers - c.busy,
		Waiting:     waiting,
		PeakWorkers: max(s.hand.PeakWorkers(), c.workers),
		PeakWaiting: st.peakAtLeast(waiting),
		Submitted:   st.submitted.Load() + st.callerSubmitted.Load(),
		Completed:   c.done + callerRan,
		Panicked:    panicked,
		Rejected:    st.rejected.Load(),
		Abandoned:   st.abandoned.Load(),
		Canceled:    st.canceled.Load(),
		Paced:       min(int(st.paced.Load()), waiting),
		Timed:       s.cfg.timings,
		Wait:        s.timings.wait.snapshot(),
		Run:         s.timings.run.snapshot(),
		LevelWait:   s.timings.levels.snapshot(),
	}
}

// waiting returns the tasks waiting for a worker, as of inHand (see
// stats.inHand) and the workers' counts c, read after it: the tasks in the
// loop's hands that no worker has received. Counts read later only grow,
// so a task that moves meanwhile is counted at most once, and the
// difference is held at 0. The sum is held to the bound, which the tasks
// waiting never exceed.
func (s *state) waiting(inHand uint64, c workerCounts) int {
	n := 0
	if received := c.received(); inHand > received {
		n = int(inHand - received)
	}
	if bound := s.cfg.maxWaiting; bound > 0 {
		n = min(n, bound)
	}
	return n
}

// peakAtLeast records n as PeakWaiting if it is higher, and returns
// PeakWaiting. The loop records the peaks it sees; tasks that workers take
// from the outbox meanwhile may make Status see others.
func (s *stats) peakAtLeast(n int) int { return int(raise(&s.peakWaiting, int64(n))) }

// stats holds what Status reports but the workers' counts. The loop is the
// only writer of the fields up to the padding, but for peakWaiting, which
// Status raises too; it publishes them with Store so that Status never
// waits for it. The fields after the padding are added to by submitters
// and workers.
type stats struct {
	state      atomic.Int32
	maxWorkers atomic.Int64
	// inHand counts the tasks waiting in the scheduler plus every task the
	// loop handed out, less those it took back: those it holds, or that
	// workers received or will. A task moving between the two leaves the
	// sum as it is.
	inHand      atomic.Uint64
	peakWaiting atomic.Int64
	submitted   atomic.Uint64 // tasks the loop accepted
	abandoned   atomic.Uint64
	paced       atomic.Int64 // tasks waiting that a rate holds back

	_ [cacheLine]byte // the loop's fields above, the others' below

	panicked        atomic.Uint64
	rejected        atomic.Uint64
	callerSubmitted atomic.Uint64 // tasks CallerRuns accepted and ran in a submitter
	callerRan       atomic.Uint64 // of them, those that ended
	canceled        atomic.Uint64 // tasks their submitters gave up on
}

// workerCounts are the workers' counts at one instant: how many there
// are, how many of them are busy, how many tasks they finished and how
// many they skipped, their submitters having given up on them.
type workerCounts struct {
	workers, busy int
	done, skipped uint64
}

// received returns how many tasks the workers received.
func (c workerCounts) received() uint64 { return c.done + c.skipped + uint64(c.busy) }

// workersAndTasks returns the workers' counts. Busy is read from the same
// workers as the count: the count did not change while they were read, and
// a busy worker is always counted, so busy <= workers.
func (s *state) workersAndTasks() workerCounts {
	for try := 1; ; try++ {
		_, before := s.hand.Workers()
		c := s.crew.counts()
		n, after := s.hand.Workers()
		c.workers = n
		if after == before {
			c.busy = min(c.busy, c.workers)
			return c
		}
		// A worker started or left meanwhile: look again. Workers start
		// and leave seldom compared with a read of the crew, but should
		// they never stop, the bound still holds.
		if try == 8 {
			c.busy = min(c.busy, c.workers)
			return c
		}
	}
}

// onWay counts the submitters on their way to the loop, on several
// counters, each on its cache line: one shared counter, which every
// submitter writes twice per task, would have them wait for each other's
// writes. A submitter picks one at random; the loop adds them up,
// only once the pool is stopping.
type onWay struct {
	counts [onWayCounts]struct {
		n atomic.Int64
		_ [cacheLine - 8]byte
	}
}

// onWayCounts is how many counters onWay keeps: enough that a few busy
// submitters seldom share one.
const onWayCounts = 8

// enter counts a submitter on its way, and returns the counter it must
// leave.
func (o *onWay) enter() *atomic.Int64 {
	c := &o.counts[rand.Uint32()%onWayCounts].n
	c.Add(1)
	return c
}

// empty reports whether no submitter is on its way. Read after closed is
// set, it is exact: a submitter that counts itself after its counter was
// read sees closed, and leaves without sending.
func (o *onWay) empty() bool {
	for i := range o.counts {
		if o.counts[i].n.Load() != 0 {
			return false
		}
	}
	return true
}

// A worker is the record of one worker: its seat in the hand-off, and the
// counts Status sums. Only the worker's own goroutine writes its counts,
// with plain stores: no two goroutines contend for them, and a task costs
// no atomic read-modify-write.
type worker struct {
	seat handoff.Seat[entry]
	// phase is done<<1 | busy: the tasks the worker finished, and whether
	// it holds one now. It only grows: taking a task sets busy, and
	// counting it done (phase+1) clears busy and adds one to done. Status
	// reads Busy and Completed from this one word, so they agree.
	phase atomic.Uint64
	// skipped counts the tasks the worker received but did not run,
	// because their submitters gave up on them first.
	skipped atomic.Uint64
	// goid is the number of the worker's goroutine, once the worker knows
	// it: it reads it before it first runs a task of a sub-pool or with a
	// key, and as its goroutine starts again after a Goexit, so that a
	// stop from such a task can find the worker, and its task (current),
	// to lend their places (see caller).
	goid    atomic.Uint64
	current *entry
	// locals holds the worker's states of Locals, and leaving says that
	// it is exiting for good (see exit); only its goroutine touches them.
	locals  locals
	leaving bool
	// gone says that the worker has exited; guarded by crew.mu.
	gone bool
	// Each worker's record on its own cache line: workers write theirs on
	// every task, and would otherwise slow each other down.
	_ [cacheLine]byte
}

// A crew lists the workers, for Status to sum their counts and for a stop
// from inside to find its worker. The loop adds a worker as it starts it;
// a worker takes itself off as it exits. Status reads the list without the
// lock: each change publishes a new view, and a view's slice is never
// written again.
type crew struct {
	mu   sync.Mutex
	all  []*worker // guarded by mu: workers started and not yet dropped
	gone int       // guarded by mu: of them, those that have exited
	// done and skipped sum what the dropped workers did; guarded by mu.
	done, skipped uint64
	view          atomic.Pointer[crewView]
}

// A crewView is the crew as Status sees it.
type crewView struct {
	workers       []*worker
	done, skipped uint64
}

// join lists w, a worker about to start.
func (c *crew) join(w *worker) {
	c.mu.Lock()
	c.all = append(c.all, w)
	c.publish()
	c.mu.Unlock()
}

// leave marks w exited, and once most of the list has, drops them, keeping
// what they did.
func (c *crew) leave(w *worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.gone = true
	if c.gone++; c.gone <= len(c.all)/2 {
		return
	}
	live := make([]*worker, 0, len(c.all)-c.gone) // a new array: Status may be reading the old one
	for _, x := range c.all {
		if x.gone {
			c.done += x.phase.Load() >> 1
			c.skipped += x.skipped.Load()
		} else {
			live = append(live, x)
		}
	}
	c.all, c.gone = live, 0
	c.publish()
}

func (c *crew) publish() {
	c.view.Store(&crewView{workers: c.all, done: c.done, skipped: c.skipped})
}

// counts sums the workers' counts, but for the number of workers, which
// the hand-off keeps.
func (c *crew) counts() workerCounts {
	v := c.view.Load()
	if v == nil {
		return workerCounts{}
	}
	n := workerCounts{done: v.done, skipped: v.skipped}
	for _, w := range v.workers {
		phase := w.phase.Load()
		n.busy += int(phase & 1)
		n.done += phase >> 1
		n.skipped += w.skipped.Load()
	}
	return n
}

// find returns the worker whose goroutine is numbered id, if it knows it.
func (c *crew) find(id uint64) *worker {
	if v := c.view.Load(); v != nil {
		for _, w := range v.workers {
			if w.goid.Load() == id {
				return w
			}
		}
	}
	return nil
}

// A caller is what its stack trace says of the goroutine that calls a
// stop.
type caller struct {
	id, by  uint64 // its number, and that of the goroutine that started it
	started bool   // startWorker or startExit started it
	leaving bool   // it is in closeLocals: its worker is exiting, counted out already
}

// laneOf returns the lane of e's queue, or nil for the pool's own queue,
// which it tells by its pointer, reading nothing of the queue: workers ask
// for every task.
func (s *state) laneOf(e *entry) *lane {
	if e.Queue == s.own {
		return nil
	}
	return laneOfQueue(e.Queue)
}
