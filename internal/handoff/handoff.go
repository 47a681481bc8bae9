// Package handoff carries tasks from a pool's loop to its workers: what
// lies between "the loop has decided that this task goes to a worker" and
// "a worker runs it".
//
// The loop gives a task (Give): to a worker parked waiting for one, else
// to a new worker if fewer than the maximum exist, else into the outbox,
// where the next worker to come free takes it without waiting for the
// loop. A worker that finishes a task asks for its next one (Next), and
// with the same call reports the end of the last. Until a worker takes a
// task from the outbox, the loop may take it back (TakeBack, Remove): to
// pause, to stop, or to let another queue's task go first.
//
// The invariant, which every method keeps under mu:
//
//	outbox.Len() > 0 implies parked.Len() == 0, until a hold passes
//
// A worker parks only after finding the outbox empty, and the loop puts a
// task in the outbox only after finding no worker parked. So a task never
// waits in the outbox while a worker waits for one, and what the loop takes
// back is exactly what no worker has started. Once a hold has passed (a
// Shutdown's deadline), workers take nothing from the outbox, and the loop
// drops what it holds.
package handoff

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gammazero/deque"
)

// A Handoff carries tasks of type T from the loop to the workers. Make one
// with New. The loop calls Give, TakeBack, Remove, Ends, Listen, SetMax and
// Close; a worker calls Next; the reaping clock calls Reap.
type Handoff[T any] struct {
	mu lock
	// outbox holds the tasks handed out and not yet taken, in the order
	// the workers take them; parked, the workers waiting for a task,
	// longest parked first.
	outbox deque.Deque[T]
	parked seats[T]
	// depth is the most tasks the outbox holds: what the workers can take
	// without waiting for the loop.
	depth int
	// max is the most workers there may be; workers counts those started
	// and not yet told to exit; min is how many the reaping clock keeps.
	max, workers, min int
	// running counts the tasks given to workers, the outbox's not
	// included, whose workers have not yet asked for their next.
	running int
	// ends lists the ends that workers reported, for the loop to take.
	ends []T
	// want is what the loop waits to hear of, and wake its signal; with
	// WantRoom, roomAt is the most tasks the outbox may hold for room, and
	// with WantIdle, idleAt the most tasks running.
	want           Want
	roomAt, idleAt int
	wake           chan struct{}
	// holds are the Shutdown deadlines: once one has passed, no worker
	// takes a task from the outbox.
	holds []<-chan struct{}
	// closed says that no task will come any more: a worker with nothing
	// to do exits.
	closed bool
	// The reaping clock: tick counts its ticks, ticked[t%4] is when tick t
	// came, and reaping says that the clock runs.
	tick    uint64
	ticked  [4]time.Time
	timeout time.Duration
	reaping bool

	// count is version<<32 | workers, written under mu, for Status to
	// read without it; every change increments the version, so that a
	// reader can tell that the count moved while it looked at the
	// workers. peak is the most workers there were.
	count atomic.Uint64
	peak  atomic.Int64
}

// A lock is a mutex that spins a little before it blocks. The hand-off's
// critical sections take tens of nanoseconds, and the loop and the workers
// take the lock for every task; sync.Mutex parks a goroutine at once when
// its processor has other goroutines to run, as it does whenever timers
// or hand-offs ready workers in numbers, and parking costs far more than
// the wait.
type lock struct{ sync.Mutex }

func (l *lock) Lock() {
	for range 64 {
		if l.TryLock() {
			return
		}
	}
	l.Mutex.Lock()
}

// A Seat is a worker's place in the hand-off: where it waits for a task
// while it is parked. Its zero value is ready.
type Seat[T any] struct {
	task  T             // the parked worker's next task, once given
	wake  chan struct{} // buffered 1: a task is in task; closed to tell the worker to exit
	since uint64        // the reaping tick at which it parked
	next  *Seat[T]      // the seat parked after it
}

// seats is the line of parked workers, first parked first: a list through
// the seats themselves, so that workers that park and leave by the
// thousand allocate nothing (a deque would grow and shrink with them).
type seats[T any] struct {
	first, last *Seat[T]
	n           int
}

func (l *seats[T]) Len() int { return l.n }

func (l *seats[T]) PushBack(s *Seat[T]) {
	if l.last == nil {
		l.first = s
	} else {
		l.last.next = s
	}
	l.last = s
	l.n++
}

func (l *seats[T]) Front() *Seat[T] { return l.first }

func (l *seats[T]) PopFront() *Seat[T] {
	s := l.first
	l.first, s.next = s.next, nil
	if l.first == nil {
		l.last = nil
	}
	l.n--
	return s
}

// Want says what the loop waits to hear of from the workers (see Listen).
type Want uint8

const (
	WantEnds Want = 1 << iota // a worker reported an end
	WantPark                  // a worker parked: it is free
	WantRoom                  // the outbox emptied to the loop's mark (see Listen)
	WantIdle                  // few enough tasks run: the loop's mark (see Listen)
)

// New returns a hand-off whose outbox holds at most depth tasks, for at
// most max workers, of which the reaping clock keeps min, reaping those
// idle for timeout (never if timeout < 0). Its signals go to wake, a
// channel with a buffer of one.
func New[T any](depth, max, min int, timeout time.Duration, wake chan struct{}) *Handoff[T] {
	h := &Handoff[T]{depth: depth, max: max, min: min, timeout: timeout, wake: wake}
	// Its buffer, made when first used, holds the whole depth: the outbox
	// fills and empties all the time, and a buffer that shrank as it
	// emptied would be made again as it filled.
	h.outbox.SetBaseCap(depth)
	return h
}

// Given says where Give put a task.
type Given uint8

const (
	Full   Given = iota // nowhere: no worker is free and there is no room
	Parked              // to a parked worker
	Start               // to a new worker, counted in: the loop starts it with the task
	Outbox              // into the outbox
)

// Give puts t where it can start soonest: with a parked worker, else with a
// new worker if fewer than the maximum exist and the outbox is empty, else,
// unless direct is set, at the back of the outbox if it has room. A direct
// task goes only to a worker free to start it at once, and only once the
// loop has taken every end reported: the loop gives tasks directly to keep
// a key's order, and an end it has not heard of may free a key whose task
// goes first.
func (h *Handoff[T]) Give(t T, direct bool) Given {
	h.mu.Lock()
	if direct && len(h.ends) > 0 {
		h.mu.Unlock()
		return Full
	}
	if h.parked.n > 0 && h.outbox.Len() == 0 {
		// (Workers park beside tasks in the outbox only once a hold has
		// passed: then t goes behind the tasks held, not before them.)
		s := h.parked.PopFront()
		h.running++
		h.mu.Unlock()
		s.task = t
		s.wake <- struct{}{}
		return Parked
	}
	switch {
	case h.workers < h.max && h.outbox.Len() == 0:
		// A task in the outbox goes before t: a new worker would start t
		// ahead of it. The outbox holds tasks while workers < max only
		// just after the maximum rose, for the workers SetMax counted in.
		h.countIn(1)
		h.running++
		h.mu.Unlock()
		return Start
	case !direct && h.outbox.Len() < h.depth:
		h.outbox.PushBack(t)
		h.mu.Unlock()
		return Outbox
	}
	h.mu.Unlock()
	return Full
}

// Next is a worker's call for its next task. If the worker ran a task
// (ran), that task's end is counted; if report is set, *end is listed for
// the loop (Ends). Either way *end is cleared, so that the worker keeps
// nothing of its last task while it waits. Next returns the first task of
// the outbox, or, with none, parks the worker at seat s until the loop
// gives it one. It returns false if the worker is to exit: it is above the
// maximum, or it was parked and the pool reaped it, or nothing will come
// any more. The worker is counted out then.
func (h *Handoff[T]) Next(s *Seat[T], ran bool, end *T, report bool) (T, bool) {
	var zero T
	h.mu.Lock()
	if ran {
		if h.running--; h.want&WantIdle != 0 && h.running <= h.idleAt {
			h.wakeLoop()
		}
	}
	if report {
		h.ends = append(h.ends, *end)
		if h.want&WantEnds != 0 {
			h.wakeLoop()
		}
	}
	*end = zero
	switch {
	case h.workers > h.max:
		h.countIn(-1) // retired: the maximum fell, or a loan ended
		h.mu.Unlock()
		return zero, false
	case h.outbox.Len() > 0 && !h.held():
		t := h.outbox.PopFront()
		h.running++
		if h.want&WantRoom != 0 && h.outbox.Len() <= h.roomAt {
			h.wakeLoop()
		}
		h.mu.Unlock()
		return t, true
	case h.closed:
		h.countIn(-1)
		h.mu.Unlock()
		return zero, false
	}
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	s.since = h.tick
	h.parked.PushBack(s)
	if h.want&WantPark != 0 {
		h.wakeLoop()
	}
	h.mu.Unlock()
	if _, ok := <-s.wake; !ok {
		return zero, false // told to exit, counted out already
	}
	t := s.task
	s.task = zero // the seat keeps no task's closure
	return t, true
}

// wakeLoop wakes the loop, which listened for what happened, and clears
// what it listened for: the signal comes once.
func (h *Handoff[T]) wakeLoop() {
	h.want = 0
	h.Signal()
}

// Signal wakes the loop, whatever it waits for: a goroutine of the pool
// exited, or a submitter left a stopping pool. A signal already pending
// will do.
func (h *Handoff[T]) Signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Listen tells the hand-off what the loop waits to hear of, before it
// waits for its signal, and reports true instead if it has happened
// already: then the loop looks again without waiting. With WantRoom,
// roomAt says how few tasks the outbox must hold (the loop has more to put
// in it, or a bounded queue waits for room); with WantIdle, idleAt how few
// tasks may run (a pause waits for none, a stop for only those that wait
// on the pool). The signal comes once, for the first of them to happen.
func (h *Handoff[T]) Listen(w Want, roomAt, idleAt int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w&WantEnds != 0 && len(h.ends) > 0 ||
		w&WantPark != 0 && h.parked.n > 0 ||
		w&WantRoom != 0 && h.outbox.Len() <= roomAt ||
		w&WantIdle != 0 && h.running <= idleAt {
		h.want = 0
		return true
	}
	h.want, h.roomAt, h.idleAt = w, roomAt, idleAt
	return false
}

// Depth returns the most tasks the outbox holds.
func (h *Handoff[T]) Depth() int { return h.depth }

// Wanted returns what the loop listens for now: nothing once a signal
// came.
func (h *Handoff[T]) Wanted() Want {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.want
}

// Ends swaps the ends that workers reported for buf, emptied, and returns
// them, in the order they were reported.
func (h *Handoff[T]) Ends(buf []T) []T {
	h.mu.Lock()
	ends := h.ends
	h.ends = buf[:0]
	h.mu.Unlock()
	return ends
}

// TakeBack removes from the outbox the first task that from selects (nil:
// the first of all) and every task behind it, and appends them to into, in
// order: no worker will start them.
func (h *Handoff[T]) TakeBack(from func(T) bool, into []T) []T {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := 0
	if from != nil {
		if i = h.outbox.Index(from); i < 0 {
			return into
		}
	}
	n := h.outbox.Len()
	for j := i; j < n; j++ {
		into = append(into, h.outbox.At(j))
	}
	for range n - i {
		h.outbox.PopBack()
	}
	return into
}

// Remove removes from the outbox every task that which selects, and
// appends them to into, in order; the others keep theirs.
func (h *Handoff[T]) Remove(which func(T) bool, into []T) []T {
	h.mu.Lock()
	defer h.mu.Unlock()
	for range h.outbox.Len() {
		t := h.outbox.PopFront()
		if which(t) {
			into = append(into, t)
		} else {
			h.outbox.PushBack(t)
		}
	}
	return into
}

// Len returns how many tasks wait in the outbox.
func (h *Handoff[T]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.outbox.Len()
}

// Parked returns how many workers are parked.
func (h *Handoff[T]) Parked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.parked.Len()
}

// Running returns how many tasks are running: given to workers, the
// outbox's not included, whose workers have not asked for their next.
func (h *Handoff[T]) Running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running
}

// SetMax sets the most workers there may be to n and returns how many
// workers it counted in, for the loop to start without a task: as many as
// the outbox holds tasks, within the new maximum, so that a maximum that
// rises starts the tasks waiting there. A maximum that falls tells parked
// workers above it to exit at once, longest parked first; busy ones exit
// as they ask for their next task.
func (h *Handoff[T]) SetMax(n int) (start int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.max = n
	for h.workers > h.max && h.parked.n > 0 {
		h.quitParked()
	}
	start = min(h.outbox.Len(), max(h.max-h.workers, 0))
	if start > 0 {
		h.countIn(start)
	}
	return start
}

// StartIdle counts in a worker that starts with no task, if there are
// fewer than the maximum, and reports whether it did: the workers that
// New starts.
func (h *Handoff[T]) StartIdle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.workers >= h.max {
		return false
	}
	h.countIn(1)
	return true
}

// Hold makes the workers take nothing more from the outbox once done is
// closed: a Shutdown's deadline.
func (h *Handoff[T]) Hold(done <-chan struct{}) {
	h.mu.Lock()
	h.holds = append(h.holds, done)
	h.mu.Unlock()
}

// held reports whether a hold has passed.
func (h *Handoff[T]) held() bool {
	for _, done := range h.holds {
		select {
		case <-done:
			return true
		default:
		}
	}
	return false
}

// Close tells the workers that no task will come any more: parked ones
// exit at once, the others once they ask for their next task and the
// outbox is empty.
func (h *Handoff[T]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for h.parked.n > 0 {
		h.quitParked()
	}
}

// quitParked tells the longest parked worker to exit, and counts it out.
func (h *Handoff[T]) quitParked() {
	close(h.parked.PopFront().wake)
	h.countIn(-1)
}

// countIn adds n to the workers, and publishes the count.
func (h *Handoff[T]) countIn(n int) {
	h.workers += n
	h.count.Store((h.count.Load()>>32+1)<<32 | uint64(uint32(h.workers)))
	if int64(h.workers) > h.peak.Load() {
		h.peak.Store(int64(h.workers))
	}
}

// Workers returns the count of workers, with its version (see count).
func (h *Handoff[T]) Workers() (n int, version uint64) {
	c := h.count.Load()
	return int(uint32(c)), c >> 32
}

// PeakWorkers returns the most workers there were at once.
func (h *Handoff[T]) PeakWorkers() int { return int(h.peak.Load()) }

// Reaping. Parked workers wait in the order they parked, and Give takes
// the longest parked first, so the front of parked is the worker idle
// longest. Each worker stamps its seat with the clock's tick as it parks;
// at each tick, Reap tells the workers parked for at least the timeout to
// exit, from the front, never leaving fewer than the minimum.
//
// A worker stamped s parked after tick s came and before tick s+1 did, so
// it has been idle for at least the timeout once tick s+1 came a timeout
// ago. Ticks are measured by when they came, not counted, as they can come
// late or two close together. With ticks one timeout apart, a worker exits
// at the tick after that: between one and two timeouts after it parked.

// NeedsClock reports whether the reaping clock must start: there are more
// workers than the minimum, the pool reaps, and the clock is not running.
// Then it counts the clock as running, and the caller starts it.
func (h *Handoff[T]) NeedsClock() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reaping || h.closed || h.timeout < 0 || h.workers <= h.min {
		return false
	}
	h.reaping = true
	return true
}

// Timeout returns how long a worker may stay idle before it is reaped.
func (h *Handoff[T]) Timeout() time.Duration { return h.timeout }

// Reap counts a tick of the reaping clock, which came at now, and tells
// the workers parked for at least the timeout to exit. It reports whether
// the clock must go on: false once the workers are down to the minimum,
// or no task will come any more.
func (h *Handoff[T]) Reap(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tick++
	h.ticked[h.tick%uint64(len(h.ticked))] = now
	for h.workers > h.min && h.parked.n > 0 && h.idleLongEnough(h.parked.Front(), now) {
		h.quitParked()
	}
	h.reaping = h.workers > h.min && !h.closed
	return h.reaping
}

// idleLongEnough reports whether the worker at seat s has been idle for at
// least the timeout at now: whether tick s.since+1 came that long ago.
func (h *Handoff[T]) idleLongEnough(s *Seat[T], now time.Time) bool {
	t := s.since + 1
	if t > h.tick {
		return false
	}
	n := uint64(len(h.ticked))
	if h.tick-t >= n {
		t = h.tick - n + 1 // too old to be remembered: the oldest remembered came later
	}
	return !h.ticked[t%n].Add(h.timeout).After(now)
}
