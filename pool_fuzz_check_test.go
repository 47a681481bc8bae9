package workerpool_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

// settle lets every goroutine run until it blocks, then checks the
// invariants that hold at rest.
func (m *fuzzModel) settle() {
	synctest.Wait()
	m.settles++
	for _, tk := range m.tasks {
		if tk.seen == 0 && m.resolvedOf(tk) {
			tk.seen = m.settles
		}
	}
	if len(m.resizes) > 0 {
		// Every Resize has returned: one of them was applied last, unless
		// the pool stopped first.
		got := m.p.Size()
		if !m.stopIssued && !slices.Contains(m.resizes, got) {
			m.failf("Size() = %d after Resize to %v", got, m.resizes)
		}
		m.size, m.resizes = got, m.resizes[:0]
	}
	m.limit.Store(int64(m.size))
	if m.cfg.v2 {
		m.settleSubs()
	}
	pending := m.freeOps[:0]
	for _, op := range m.freeOps {
		switch {
		case op.done.Load():
		case op.free():
			buf := make([]byte, 1<<20)
			m.failf("%s is still blocked, though nothing can hold it up; the goroutines:\n%s", op.desc, buf[:runtime.Stack(buf, true)])
		default:
			pending = append(pending, op)
		}
	}
	m.freeOps = pending
	if m.anyStopReturned() {
		m.startedAfter.Store(true)
	}
	m.checkAtRest()
}

// checkAtRest checks Status against the model while nothing moves.
func (m *fuzzModel) checkAtRest() {
	s := m.p.Status()
	// A task that CallerRuns runs in its submitter is in none of Status's
	// terms until it ends: its submission is still in progress.
	inCallers := uint64(m.callerRunning.Load())
	if s.Submitted != s.Completed+s.Abandoned+s.Canceled+uint64(s.Waiting)+uint64(s.Busy)+inCallers {
		m.failf("at rest, Submitted != Completed + Abandoned + Canceled + Waiting + Busy (+ %d running in callers): %+v", inCallers, s)
	}
	if s.Idle != s.Workers-s.Busy {
		m.failf("Idle != Workers - Busy: %+v", s)
	}
	if want := uint64(m.finished.Load()); s.Completed != want {
		m.failf("Completed = %d, but %d tasks ended", s.Completed, want)
	}
	if want := uint64(m.panicked.Load()); s.Panicked != want {
		m.failf("Panicked = %d, but %d tasks panicked", s.Panicked, want)
	}
	if want := m.running.Load(); int64(s.Busy) != want {
		m.failf("Busy = %d, but %d tasks run on workers", s.Busy, want)
	}
	// (In v2, a task may wait for its sub-pool or its key; the turn model
	// checks those.)
	if !m.cfg.v2 && s.Waiting > 0 && s.State != workerpool.Paused && (s.Idle != 0 || s.Workers < s.MaxWorkers) {
		m.failf("%d tasks wait while the pool could run them: %+v", s.Waiting, s)
	}
	if s.Workers > s.MaxWorkers && s.Idle != 0 {
		m.failf("%d idle workers while above the maximum: %+v", s.Idle, s)
	}
	if s.PeakWorkers > m.maxSize {
		m.failf("PeakWorkers = %d, above every maximum set (%d)", s.PeakWorkers, m.maxSize)
	}
	if m.cfg.bound > 0 && (s.Waiting > m.cfg.bound || s.PeakWaiting > m.cfg.bound) {
		m.failf("Waiting %d, PeakWaiting %d beyond the bound %d", s.Waiting, s.PeakWaiting, m.cfg.bound)
	}

	var accepted, rejected, unresolved, waitStopped, ffPanics uint64
	for _, tk := range m.tasks {
		if tk.kind == kindPanic && tk.method != viaSubmitWait && tk.finished.Load() {
			ffPanics++
		}
		switch {
		case !m.resolvedOf(tk):
			unresolved++
		case tk.accepted():
			accepted++
		case tk.err == workerpool.ErrQueueFull:
			rejected++
		case errors.Is(tk.err, workerpool.ErrStopped) && tk.method == viaSubmitWait:
			waitStopped++
		}
	}
	if s.Rejected != rejected {
		m.failf("Rejected = %d, but %d submissions got ErrQueueFull", s.Rejected, rejected)
	}
	if s.Submitted < accepted || s.Submitted > accepted+unresolved+waitStopped {
		m.failf("Submitted = %d; %d submissions were accepted, %d are pending, %d SubmitWait got ErrStopped",
			s.Submitted, accepted, unresolved, waitStopped)
	}
	if got := uint64(m.handled.Load()); got != ffPanics {
		m.failf("the panic handler ran %d times for %d panics of fire-and-forget tasks", got, ffPanics)
	}

	m.mu.Lock()
	stopIssued, paused := m.stopIssued, false
	for _, pz := range m.pauses {
		paused = paused || !pz.cancelled
	}
	m.mu.Unlock()
	switch {
	case m.anyStopReturned():
		if s.State != workerpool.Stopped || s.Workers != 0 || s.Waiting != 0 {
			m.failf("after a stop call returned: %+v", s)
		}
		fallthrough
	case stopIssued:
		if !m.p.Stopped() {
			m.failf("Stopped() is false after a stop call")
		}
		if s.State != workerpool.Stopping && s.State != workerpool.Stopped {
			m.failf("State = %v after a stop call", s.State)
		}
	default:
		if m.p.Stopped() {
			m.failf("Stopped() is true before any stop call")
		}
		want := workerpool.Running
		if paused {
			want = workerpool.Paused
		}
		if s.State != want {
			m.failf("State = %v, want %v", s.State, want)
		}
		if s.MaxWorkers != m.size || m.p.Size() != m.size {
			m.failf("MaxWorkers = %d, Size() = %d, want %d", s.MaxWorkers, m.p.Size(), m.size)
		}
		if s.Workers < m.cfg.min {
			m.failf("%d workers, below the minimum %d", s.Workers, m.cfg.min)
		}
	}
	if m.cfg.v2 {
		m.checkSubsAtRest()
		m.tm.check(m)
	}
}

// finish releases everything, stops the pool as the input says, and checks
// the final accounts: every accepted task ran exactly once or was handed
// back or dropped with its waiter told. (A v2 input's tasks are released
// one by one as they run, so that the turn model follows them to the end.)
func (m *fuzzModel) finish() {
	m.trace = append(m.trace, "end: release all, resume all")
	for _, tk := range m.tasks {
		if tk.gate != nil && !tk.opened && !m.cfg.v2 {
			tk.opened = true
			close(tk.gate)
		}
	}
	m.mu.Lock()
	for _, pz := range m.pauses {
		pz.cancelled = true
		if pz.held {
			pz.held = false
			m.held.Add(-1)
		}
		pz.cancel()
	}
	m.mu.Unlock()
	if m.cfg.v2 {
		for range m.tm.pauses {
			m.tm.resume()
		}
	}
	m.stopSettled = m.anyStopReturned()
	m.stop([...]int{opStop, opStopWait, opShutdown, opShutdown}[m.cfg.final], m.cfg.final == 3, time.Second)
	// Sleeping tasks and deadlines need the clock to move; each task sleeps
	// at most a second, so a second per task is enough for all to end, and
	// a v2 input needs as many releases again.
	for range 2*len(m.tasks) + 10 {
		m.settle()
		if m.allDone() {
			break
		}
		if m.cfg.v2 && m.releaseRunning(false, 0) {
			continue
		}
		time.Sleep(time.Second)
		if m.cfg.v2 {
			m.tm.advance(time.Now())
		}
	}
	if m.t.Failed() {
		return
	}
	for _, op := range m.ops {
		if !op.done.Load() {
			m.failf("%s never returned", op.desc)
		}
	}
	if m.t.Failed() {
		return // the bubble reports the blocked goroutines
	}

	s := m.p.Status()
	if s.State != workerpool.Stopped || s.Workers != 0 || s.Busy != 0 || s.Waiting != 0 {
		m.failf("after the pool stopped: %+v", s)
	}

	// Learn which tasks Stop returned by calling them: nothing else runs now.
	m.identifying.Store(true)
	var returned int
	var lists [3]int // per target
	for _, st := range m.stops {
		if st.kind == opShutdown && !m.subDropping {
			// Shutdown's error says whether every accepted task ran: nil,
			// or its ctx's error if that is done, or ErrStopped. (Tasks a
			// sub-pool's Stop dropped are its caller's: they do not count.)
			dropped := s.Abandoned > 0
			switch {
			case st.err == nil && st.tasks != nil:
				m.failf("Shutdown returned %d tasks and a nil error", len(st.tasks))
			case !dropped && st.err != nil:
				m.failf("Shutdown returned %v, but no task was dropped", st.err)
			case dropped && st.err == nil:
				m.failf("Shutdown returned nil, but %d tasks were dropped", s.Abandoned)
			case dropped && !errors.Is(st.err, workerpool.ErrStopped) && !(st.deadline && errors.Is(st.err, context.DeadlineExceeded)):
				m.failf("Shutdown returned %v", st.err)
			}
		}
		if len(st.tasks) > 0 {
			lists[st.target]++
		}
		m.identified = nil
		for _, fn := range st.tasks {
			fn()
			returned++
		}
		st.returned = m.identified
	}
	for target, n := range lists {
		if n > 1 {
			m.failf("%d stop calls of %s returned tasks; only the first may", n, targetName(target))
		}
	}

	var accepted, waitStopped, ran uint64
	for _, tk := range m.tasks {
		runs := int(tk.runs.Load())
		ran += uint64(runs)
		if runs > 0 && !tk.finished.Load() {
			m.failf("task %d (%v) started but never ended", tk.id, tk.kind)
		}
		switch {
		case tk.accepted() && tk.method == viaSubmitWait:
			accepted++
			if runs != 1 || tk.returned != 0 {
				m.failf("SubmitWait task %d returned %v: ran %d times, returned by Stop %d times", tk.id, tk.err, runs, tk.returned)
			}
		case tk.accepted():
			accepted++
			if runs+tk.returned != 1 {
				m.failf("accepted task %d (%v %v): ran %d times, returned by Stop %d times; want exactly once in all",
					tk.id, tk.method, tk.kind, runs, tk.returned)
			}
		default:
			if errors.Is(tk.err, workerpool.ErrStopped) && tk.method == viaSubmitWait {
				waitStopped++
			}
			if runs != 0 || tk.returned != 0 {
				m.failf("task %d refused with %v: ran %d times, returned by Stop %d times", tk.id, tk.err, runs, tk.returned)
			}
		}
	}
	if s.Completed != ran {
		m.failf("Completed = %d, but %d tasks ran", s.Completed, ran)
	}
	// A SubmitWait that got ErrStopped was either refused or accepted and
	// then dropped by Stop; Status counts the dropped ones.
	droppedWaiters := s.Submitted - accepted
	if s.Submitted < accepted || droppedWaiters > waitStopped {
		m.failf("Submitted = %d, but %d submissions were accepted and %d SubmitWait got ErrStopped", s.Submitted, accepted, waitStopped)
	} else if s.Abandoned != uint64(returned)+droppedWaiters {
		m.failf("Abandoned = %d, but Stop returned %d tasks and dropped %d SubmitWait tasks", s.Abandoned, returned, droppedWaiters)
	}
	m.checkOrder()
	dropper := false
	for _, st := range m.stops {
		dropper = dropper || st.kind == opStop || st.err != nil
	}
	if !dropper && s.Abandoned != 0 {
		m.failf("%d tasks abandoned, though only StopWait or Shutdown in time was called", s.Abandoned)
	}
	if left := bubbleGoroutines(); len(left) > 0 {
		m.failf("%d goroutines left after the pool stopped and every call returned:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// atDeadline reports whether b started at the instant a Shutdown deadline
// passed. Two workers that take tasks then decide apart: one may start the
// later task, seeing the deadline not yet passed, and the other drop the
// earlier one, seeing it passed (Pool.Shutdown says so).
func (m *fuzzModel) atDeadline(b *fuzzTask) bool {
	for _, st := range m.stops {
		if st.deadline && b.started.Equal(st.at) {
			return true
		}
	}
	return false
}

// checkOrder checks that tasks are handed to workers, and come back from
// Stop, in the order the pool accepted them, and that none starts after a
// Shutdown deadline. The model knows the order of two tasks only when one's
// submission had returned before the other's was launched. It sees the
// order of hand-offs only as the order of starts, which is the same only
// when there is one worker.
func (m *fuzzModel) checkOrder() {
	before := func(a, b *fuzzTask) bool { // the pool accepted a before b, in one queue
		return a.seen != 0 && a.seen <= b.launched && a.accepted() && sameQueue(a, b)
	}
	for _, b := range m.tasks {
		if b.startSeq.Load() == 0 {
			continue // never started on a worker
		}
		for _, a := range m.tasks {
			switch {
			case !before(a, b):
			case a.runs.Load() == 0 && !m.atDeadline(b):
				m.failf("task %d started on a worker, but task %d, accepted before it, never started", b.id, a.id)
			case (m.maxSize == 1 || a.keyed) && a.startSeq.Load() > b.startSeq.Load():
				// Tasks with one key never overlap, so they start in order
				// whatever the maximum.
				m.failf("task %d started on a worker before task %d, which was accepted first", b.id, a.id)
			}
		}
		for _, st := range m.stops {
			// A task that a worker finishing exactly at the deadline
			// started may count as started before it.
			if st.deadline && b.started.After(st.at) {
				m.failf("task %d started at %v, after the deadline of Shutdown at %v", b.id, b.started, st.at)
			}
		}
	}
	for _, st := range m.stops {
		for i := 1; i < len(st.returned); i++ {
			if a, b := st.returned[i], st.returned[i-1]; before(a, b) {
				m.failf("Stop returned task %d before task %d, which was accepted first", b.id, a.id)
			}
		}
	}
}
