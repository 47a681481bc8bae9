package workerpool

import (
	"sync"
	"sync/atomic"
	"weak"
)

// A lane is a sub-pool as its submitters, the loop and the workers know
// it: its queue in the scheduler, the gate its submitters pass, and the
// counters its Status reads. A Subpool points to its lane, and to its
// Pool. The loop holds a lane only while a task of it waits or runs, so a
// sub-pool stopped and dropped leaves nothing behind; and the lane points
// back to its Subpool only weakly, for the task observer's TaskTiming, so
// that a task queued in a sub-pool does not keep the Pool reachable from
// the loop: a pool dropped unstopped is collected all the same.
type lane struct {
	queue *queue                // owned by the loop
	sub   weak.Pointer[Subpool] // for TaskTiming.Subpool
	name  string                // the sub-pool's, for errors that name it
	// handed counts the lane's tasks that the loop gave to the hand-off,
	// less those it took back; owned by the loop.
	handed uint64

	// Submitters hold gate for reading while they submit. Stop and
	// StopWait close stopping, which releases the submitters waiting for
	// room, then set closed holding gate for writing, so that when they
	// send their request no submission to the sub-pool is on its way.
	gate     sync.RWMutex
	closed   atomic.Bool
	stopping chan struct{}
	once     sync.Once

	stats   laneStats
	timings taskTimings // with WithTaskTimings
}

// laneOf returns the lane of e's queue, or nil for the pool's own queue.
func laneOf(e *entry) *lane { return laneOfQueue(e.Queue) }

// laneOfQueue returns the lane of queue q, or nil for the pool's own
// queue (or none: a task run in its submitter has no queue).
func laneOfQueue(q *queue) *lane {
	if q == nil {
		return nil
	}
	l, _ := q.Owner.(*lane)
	return l
}

// laneStats are a lane's counters. The loop writes the first group, alone;
// the others are added to by submitters and workers.
type laneStats struct {
	state       atomic.Int32
	limit       atomic.Int64
	submitted   atomic.Uint64 // tasks the loop accepted
	abandoned   atomic.Uint64 // dropped by a stop
	peakWaiting atomic.Int64
	paced       atomic.Int64 // tasks waiting that a rate holds back
	// inHand counts the tasks waiting in the lane's queue and those handed
	// out of it, less those taken back (see loop.publishLane): those no
	// worker has started are waiting.
	inHand atomic.Uint64

	_ [cacheLine]byte

	started, ended atomic.Uint64 // tasks workers started and ended
	skipped        atomic.Uint64 // tasks workers received and did not run: their submitters gave up on them
	canceled       atomic.Uint64 // tasks their submitters gave up on
	panicked       atomic.Uint64
	rejected       atomic.Uint64
}

// waiting returns the lane's tasks waiting: those in its queue, and those
// handed out of it that no worker has started or skipped. A task that a
// worker is taking, between its receive and its start, still counts, so
// the sum may pass the pool's bound for that moment: it is held to bound
// (0: none). Reading inHand first can only make the sum smaller.
func (l *lane) waiting(bound int) int {
	st := &l.stats
	n := int(st.inHand.Load()) - int(st.started.Load()) - int(st.skipped.Load())
	if bound > 0 {
		n = min(n, bound)
	}
	return max(n, 0)
}

// cacheLine is the size of a cache line on the machines Go mostly runs on:
// fields written by different goroutines, each on a line of its own, do
// not slow each other down.
const cacheLine = 64
