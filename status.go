package workerpool

import (
	"fmt"
	"sync/atomic"
)

// State is the life-cycle stage of a [Pool].
type State int

const (
	// Running: the pool accepts tasks and hands them to workers.
	Running State = iota
	// Paused: the pool accepts tasks but hands none out (see [Pool.Pause]).
	Paused
	// Stopping: the pool accepts no more tasks and is finishing the ones it
	// has (see [Pool.StopWait] and [Pool.Stop]).
	Stopping
	// Stopped: every task is finished or abandoned and every goroutine the
	// pool started has exited.
	Stopped
)

// String returns "running", "paused", "stopping" or "stopped".
func (s State) String() string {
	switch s {
	case Running:
		return "running"
	case Paused:
		return "paused"
	case Stopping:
		return "stopping"
	case Stopped:
		return "stopped"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Status is a snapshot of a pool's state and counters, taken by
// [Pool.Status].
//
// Every snapshot is in range: 0 <= Busy <= Workers, Idle = Workers - Busy,
// Workers <= PeakWorkers, Waiting <= PeakWaiting, Completed <= Submitted,
// and the counters never decrease from one snapshot to the next. Busy and
// Completed come from the same instant. The other fields are read one by
// one, so while tasks move they may come from slightly different instants;
// at rest (no submission, hand-off or completion in progress) they balance:
//
//	Submitted == Completed + Abandoned + Canceled + Waiting + Busy
//
// A task that [CallerRuns] is running in its submitter is in Submitted only,
// until it completes; its Submit has not returned, so the pool is not at
// rest.
//
// A snapshot is not a synchronization point. The dispatcher counts a task
// in Submitted just after it accepts it, so a snapshot taken as Submit
// returns may not show it yet; a task is in Completed before its SubmitWait
// returns. To wait for tasks, use [Pool.SubmitWait] or [Pool.StopWait].
type Status struct {
	// State is the pool's life-cycle stage.
	State State
	// MaxWorkers is the current limit on workers (see [Pool.Resize]);
	// MinWorkers is the number kept through idle periods.
	MaxWorkers, MinWorkers int
	// Workers is the number of worker goroutines; Busy of them are running
	// (or have just been handed) a task and Idle = Workers - Busy wait for
	// one. Waiting is the number of tasks in the waiting queue.
	Workers, Busy, Idle, Waiting int
	// PeakWorkers and PeakWaiting are the highest Workers and Waiting seen.
	PeakWorkers, PeakWaiting int
	// Submitted counts accepted tasks, including those a [CallerRuns]
	// submitter ran itself. Completed counts tasks that finished running,
	// panicked ones included; Panicked is the part of Completed that
	// panicked.
	Submitted, Completed, Panicked uint64
	// Rejected counts submissions refused with [ErrQueueFull]; they are not
	// in Submitted. Abandoned counts accepted tasks that never started
	// because of [Pool.Stop], [Subpool.Stop] or an expired [Pool.Shutdown].
	Rejected, Abandoned uint64
	// Canceled counts accepted tasks that never started because their
	// submitters gave up on them first: a [Call] whose context was done,
	// the tasks of a [Group] or a [Map] whose context was done, or the
	// items of a [MapSeq] whose loop ended early or whose context was done.
	// They left the queue at once.
	Canceled uint64
	// Timed says whether the pool times its tasks: whether it was made
	// with [WithTaskTimings] (or [WithTaskObserver]). Wait and Run then sum
	// up how long tasks waited, from when the pool accepted them to when
	// they started, and how long they ran; else they are zero. A task is
	// counted in both once it has ended.
	Timed     bool
	Wait, Run Timing
}

// Status returns a snapshot of the pool's state and counters. It reads
// atomics only and never waits for the dispatcher, so it can be called from
// a monitoring loop or from inside a task. It costs a read of each worker's
// record: a few nanoseconds a worker.
func (p *Pool) Status() Status {
	s := &p.stats
	// Read the panics before the tasks that include them, the tasks before
	// the submissions that include them, and each gauge before its peak, so
	// that every part is at most the whole it belongs to.
	panicked := s.panicked.Load()
	callerRan := s.callerRan.Load()
	inHand := s.inHand.Load()
	c := s.workersAndTasks()
	workers, busy, done := c.workers, c.busy, c.done
	waiting := p.waiting(inHand, c)
	return Status{
		State:       State(s.state.Load()),
		MaxWorkers:  int(s.maxWorkers.Load()),
		MinWorkers:  p.cfg.minWorkers,
		Workers:     workers,
		Busy:        busy,
		Idle:        workers - busy,
		Waiting:     waiting,
		PeakWorkers: int(s.peakWorkers.Load()),
		PeakWaiting: s.peakAtLeast(waiting),
		Submitted:   s.submitted.Load() + s.callerSubmitted.Load(),
		Completed:   done + callerRan,
		Panicked:    panicked,
		Rejected:    s.rejected.Load(),
		Abandoned:   s.abandoned.Load(),
		Canceled:    s.canceled.Load(),
		Timed:       p.cfg.timings,
		Wait:        p.timings.wait.snapshot(),
		Run:         p.timings.run.snapshot(),
	}
}

// waiting returns the tasks waiting for a worker, as of inHand (see
// stats.inHand) and the workers' counts c, read after it: the tasks in the
// dispatcher's hands that no worker has received. Counts read later only
// grow, so a task that moves meanwhile is counted at most once, and the
// difference is held at 0. The sum is held to the bound, which the tasks
// waiting never exceed.
func (p *Pool) waiting(inHand uint64, c workerCounts) int {
	n := 0
	if received := c.received(); inHand > received {
		n = int(inHand - received)
	}
	if bound := p.cfg.maxWaiting; bound > 0 {
		n = min(n, bound)
	}
	return n
}

// peakAtLeast records n as PeakWaiting if it is higher, and returns
// PeakWaiting. The dispatcher records the peaks it sees; tasks that workers
// take from the hand-off buffer meanwhile may make Status see others.
func (s *stats) peakAtLeast(n int) int { return int(raise(&s.peakWaiting, int64(n))) }

// raise sets peak to n if n is higher, and returns the peak. Several
// goroutines may raise it at once; it never falls.
func raise(peak *atomic.Int64, n int64) int64 {
	for {
		old := peak.Load()
		if n <= old {
			return old
		}
		if peak.CompareAndSwap(old, n) {
			return n
		}
	}
}

// cacheLine is the size of a cache line on the machines Go mostly runs on:
// fields written by different goroutines, each on a line of its own, do
// not slow each other down.
const cacheLine = 64

// stats holds what Status reports. The dispatcher is the only writer of
// the fields up to reg, which it publishes with Store so that Status never
// waits for it, but for workers, which the dispatcher counts in and workers
// count out as they leave, and peakWaiting, which Status
// raises too. The fields after the padding are added to by submitters and
// workers.
type stats struct {
	state       atomic.Int32
	maxWorkers  atomic.Int64
	retireAbove atomic.Int64  // maxWorkers plus the stoppers: see dispatcher.setMax
	workers     atomic.Uint64 // version<<32 | count; see countIn
	peakWorkers atomic.Int64
	// inHand counts the tasks waiting in the scheduler plus every task the
	// dispatcher handed to a worker, less those it took back: those it
	// holds, or that workers received or will. A task moving between the
	// two leaves the sum as it is.
	inHand      atomic.Uint64
	peakWaiting atomic.Int64
	submitted   atomic.Uint64 // tasks the dispatcher accepted
	abandoned   atomic.Uint64
	reg         atomic.Pointer[registry] // every worker, for Status to sum

	_ [cacheLine]byte // the dispatcher's fields above, the others' below

	panicked        atomic.Uint64
	rejected        atomic.Uint64
	callerSubmitted atomic.Uint64 // tasks CallerRuns accepted and ran in a submitter
	callerRan       atomic.Uint64 // of them, those that ended
	canceled        atomic.Uint64 // tasks their submitters gave up on
	quitsReceived   atomic.Uint64 // quits workers received
}

// A registry lists the workers for Status: those started and not yet
// forgotten by the dispatcher, which forgets them once they have exited,
// and the tasks that
// the forgotten ones finished. The dispatcher replaces it whole, so a
// reader sees each worker once.
type registry struct {
	workers []*worker
	// retiredDone and retiredSkipped sum what the workers no longer listed
	// did: the tasks they finished, and those they skipped.
	retiredDone, retiredSkipped uint64
}

// The count of workers shares a word with a version that every change
// increments, so that a reader can tell whether the count changed while it
// looked at the workers. The dispatcher counts a worker in as it starts it,
// and out as it sends it a quit; a worker counts itself out as it retires
// or, once the dispatcher winds down, as it leaves.

// countIn counts one more worker. Only the dispatcher calls it, so the
// count it makes is at most one more than it saw: raising the peak to that
// first keeps Workers <= PeakWorkers in every snapshot.
func (s *stats) countIn() {
	if n := int64(s.workerCount()) + 1; n > s.peakWorkers.Load() {
		s.peakWorkers.Store(n)
	}
	s.workers.Add(1<<32 + 1)
}

// countOut counts one worker fewer; there is at least one.
func (s *stats) countOut() {
	s.workers.Add(1<<32 - 1) // version+1, count-1
}

// workerCount returns the count of workers.
func (s *stats) workerCount() int { return int(uint32(s.workers.Load())) }

// retireOne counts one worker out if there are more than the maximum (and
// the stoppers beside it: retireAbove), and reports whether it did: the
// calling worker then exits.
func (s *stats) retireOne() bool { return s.countOutAbove(int(s.retireAbove.Load())) }

// countOutAbove counts one worker out if there are more than floor, and
// reports whether it did. Workers retiring at the same time count
// themselves out too, so only a compare-and-swap keeps the count from
// going below floor.
func (s *stats) countOutAbove(floor int) bool {
	for {
		w := s.workers.Load()
		if int(uint32(w)) <= floor {
			return false
		}
		if s.workers.CompareAndSwap(w, w+1<<32-1) {
			return true
		}
	}
}

// workerCounts are the workers' counts at one instant: how many there
// are, how many of them are busy, how many tasks they finished and how
// many they skipped, their submitters having given up on them.
type workerCounts struct {
	workers, busy int
	done, skipped uint64
}

// received returns how many tasks the workers received and claimed.
func (c workerCounts) received() uint64 { return c.done + c.skipped + uint64(c.busy) }

// workersAndTasks returns the workers' counts. Busy is read from the same
// workers as the count: the count did not change while they were read, and
// a busy worker is always counted, so busy <= workers.
func (s *stats) workersAndTasks() workerCounts {
	for try := 1; ; try++ {
		before := s.workers.Load()
		reg := s.reg.Load()
		c := workerCounts{done: reg.retiredDone, skipped: reg.retiredSkipped}
		for _, w := range reg.workers {
			phase := w.phase.Load()
			c.busy += int(phase & 1)
			c.done += phase >> 1
			c.skipped += w.skipped.Load()
		}
		after := s.workers.Load()
		c.workers = int(uint32(after))
		if after == before {
			return c
		}
		// A worker started or left meanwhile: look again. Workers start
		// and leave seldom compared with a read of the registry, but
		// should they never stop, the bound still holds.
		if try == 8 {
			c.busy = min(c.busy, c.workers)
			return c
		}
	}
}
