package workerpool

import (
	"fmt"
	"strings"
	"time"
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
	// Paced is the part of Waiting that a rate holds back (see
	// [Pool.SetRate]): tasks that would start but for a token of the
	// pool's rate, their sub-pool's or their key's.
	Paced int
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
	// the tasks of a [Group] or a [Map] whose context was done (by the
	// caller, or because another of its tasks failed: one a stop dropped
	// included), or the items of a [MapSeq] whose loop ended early or whose
	// context was done. They left the queue at once. So a stop that drops a
	// Group's queued tasks counts the first it reaches Abandoned, and those
	// the Group withdrew as it failed, Canceled.
	Canceled uint64
	// Timed says whether the pool times its tasks: whether it was made
	// with [WithTaskTimings] (or [WithTaskObserver]). Wait and Run then sum
	// up how long tasks waited, from when the pool accepted them to when
	// they started, and how long they ran; else they are zero. A task is
	// counted in both once it has ended.
	Timed     bool
	Wait, Run Timing
	// LevelWait sums up Wait by priority level, once a [Level] was made
	// (see [Pool.Priority]) on a pool that times its tasks: for 0 and each
	// level made. Else it is nil.
	LevelWait map[int]Timing
}

// String returns the snapshot in one line a log can hold: the state, the
// workers, the tasks waiting and the counters, with how long tasks waited
// and ran on average if they are timed; the buckets are left out.
func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: workers %d/%d (busy %d, peak %d), waiting %d (peak %d), submitted %d, completed %d",
		s.State, s.Workers, s.MaxWorkers, s.Busy, s.PeakWorkers, s.Waiting, s.PeakWaiting, s.Submitted, s.Completed)
	for _, c := range []struct {
		name string
		n    uint64
	}{{"panicked", s.Panicked}, {"rejected", s.Rejected}, {"abandoned", s.Abandoned}, {"canceled", s.Canceled}} {
		if c.n > 0 {
			fmt.Fprintf(&b, ", %s %d", c.name, c.n)
		}
	}
	if s.Timed && s.Run.Count > 0 {
		fmt.Fprintf(&b, ", mean wait %v, run %v", s.Wait.Total/time.Duration(max(s.Wait.Count, 1)), s.Run.Total/time.Duration(s.Run.Count))
	}
	return b.String()
}
