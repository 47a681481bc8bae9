package workerpool

import (
	"context"
	"time"

	"sync/atomic"

	"github.com/dispatchkit/workerpool/internal/handoff"
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
	lentLane *lane           // lend: the lane whose place the worker's task lent, if any
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
