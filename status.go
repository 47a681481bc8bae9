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
// atomics only and never waits for the loop, so it can be called from a
// monitoring loop or from inside a task. It costs a read of each worker's
// record: a few nanoseconds a worker.
func (p *Pool) Status() Status { return p.s.status() }

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
		Timed:       s.cfg.timings,
		Wait:        s.timings.wait.snapshot(),
		Run:         s.timings.run.snapshot(),
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
