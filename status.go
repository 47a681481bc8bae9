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
// [Pool.Status]. Each field is read atomically on its own, so while tasks
// are moving the fields may come from slightly different instants. At rest
// (no submission, hand-off or completion in progress) they balance:
//
//	Submitted == Completed + Abandoned + Waiting + Busy
//
// A task that [CallerRuns] is running in its submitter is in Submitted only,
// until it completes; its Submit has not returned, so the pool is not at
// rest.
//
// A snapshot is not a synchronization point. The dispatcher counts a task
// just after its Submit returns, and a task stays Busy until its worker
// counts it finished, just after its SubmitWait returns. To wait for tasks, use
// [Pool.SubmitWait] or [Pool.StopWait].
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
	// because of [Pool.Stop] or an expired [Pool.Shutdown].
	Rejected, Abandoned uint64
}

// Status returns a snapshot of the pool's state and counters. It reads
// atomics only and never waits for the dispatcher, so it is cheap enough to
// call from a monitoring loop or from inside a task.
func (p *Pool) Status() Status {
	s := &p.stats
	// finished before started: a task is started before it finishes, so
	// busy is never negative.
	finished := s.finished.Load()
	busy := int(s.started.Load() - finished)
	workers := int(s.workers.Load())
	return Status{
		State:       State(s.state.Load()),
		MaxWorkers:  int(s.maxWorkers.Load()),
		MinWorkers:  p.cfg.minWorkers,
		Workers:     workers,
		Busy:        busy,
		Idle:        max(workers-busy, 0),
		Waiting:     int(s.waiting.Load()),
		PeakWorkers: int(s.peakWorkers.Load()),
		PeakWaiting: int(s.peakWaiting.Load()),
		Submitted:   s.submitted.Load(),
		Completed:   finished + s.callerRan.Load(),
		Panicked:    s.panicked.Load(),
		Rejected:    s.rejected.Load(),
		Abandoned:   s.abandoned.Load(),
	}
}

// stats holds what Status reports. The gauges (state to peakWaiting) and
// started have one writer, the dispatcher, and are published with Store so
// that Status never waits for it; the other counters are added to by
// whichever goroutine sees the event (dispatcher, worker or caller).
type stats struct {
	state                             atomic.Int32
	maxWorkers, workers               atomic.Int64
	waiting, peakWorkers, peakWaiting atomic.Int64
	submitted, panicked               atomic.Uint64
	started                           atomic.Uint64 // tasks handed to workers
	finished                          atomic.Uint64 // tasks workers finished
	callerRan                         atomic.Uint64 // tasks CallerRuns ran in a submitter
	rejected, abandoned               atomic.Uint64
}
