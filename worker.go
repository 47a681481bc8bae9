package workerpool

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// A PanicError is a task's panic, recovered by the pool. [Pool.SubmitWait]
// returns it; fire-and-forget tasks hand it to the panic handler (see
// [WithPanicHandler]).
type PanicError struct {
	// Value is what the task passed to panic.
	Value any
	// Stack is the panicking goroutine's stack trace, as [debug.Stack]
	// formats it.
	Stack []byte
}

// Error returns "workerpool: task panicked: " followed by the panic value.
func (e *PanicError) Error() string {
	return fmt.Sprintf("workerpool: task panicked: %v", e.Value)
}

// Unwrap returns the panic value if it is an error, so that [errors.Is] and
// [errors.As] reach it, and nil otherwise.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// A job is what travels from a submitter through the dispatcher to a
// worker: a fire-and-forget func, or a waiter. Exactly one of fn and w is
// set, or, on p.tasks only, r, a request to the dispatcher.
type job struct {
	fn  func()
	w   waiter
	r   *request
	seq uint64 // the order in which the dispatcher sent it on p.work, from 1
	// lane is a sub-pool's lane, for its task; line is a keyed task's key
	// line (keyed, on p.tasks), and key its key. The pool's own unkeyed
	// tasks have neither, and need no report when they end.
	lane *lane
	line *keyLine
	key  string
}

// valid reports whether t is a task rather than the zero job, which tells a
// worker to exit when received and means "no task" as a first task.
func (t job) valid() bool { return t.fn != nil || t.w != nil }

// A waiter is a task whose submitter learns what became of it: the task of
// a SubmitWait, a Future or a Group. The pool calls finish exactly once:
// after do returned, panicked or called runtime.Goexit (with nil or the
// *PanicError), or with ErrStopped when Stop dropped the task before it
// started. finish may run on a worker, on the dispatcher (for a dropped
// task) or on the submitter (under CallerRuns), so it must not block or
// call into the pool.
type waiter interface {
	do()
	finish(err error)
}

// A waitTask is SubmitWait's waiter. It is one allocation: done is a
// WaitGroup held by value, not a channel.
type waitTask struct {
	fn   func()
	err  error          // nil, or the task's *PanicError, or ErrStopped; written before done.Done
	done sync.WaitGroup // Add(1) by SubmitWait; Done exactly once, in finish
}

func (w *waitTask) do() { w.fn() }

// finish records the outcome and releases the waiting caller. Done makes
// everything the task wrote happen before SubmitWait returns.
func (w *waitTask) finish(err error) {
	w.err = err
	w.done.Done()
}

// A worker is the record of one worker: what the dispatcher reads to reap
// it and to see its tasks end, and what Status sums. Only the worker's own
// goroutine writes it once it runs, with plain stores: no two goroutines
// contend for it, and a task costs no atomic read-modify-write.
type worker struct {
	// phase is done<<1 | busy: the tasks the worker finished, and whether
	// it holds one now. It only grows: receiving a task sets busy, and
	// counting it done (phase+1) clears busy and adds one to done. Status
	// reads Busy and Completed from this one word, so they agree.
	phase atomic.Uint64
	// since is 1 + the reaping clock's tick (Pool.tick) when the worker
	// last went idle, that is, as it was about to park on p.work; 0 from
	// when it receives a task until then, panic handler included; and
	// exitedMark once it has left for good. It changes from a stamp only
	// while phase is odd (busy), so a reader that sees the same even phase
	// before and after reading since has the stamp of the idle period that
	// phase belongs to, or 0.
	since atomic.Uint64
	// Each worker's record on its own cache line: workers write theirs on
	// every task, and would otherwise slow each other down.
	_ [cacheLine - 16]byte
}

// cacheLine is the size of a cache line on the machines Go mostly runs on.
const cacheLine = 64

// exitedMark is since for a worker that has left for good.
const exitedMark = ^uint64(0)

// state returns w's phase and since as of one instant while it was idle, or
// its phase and some value of since while it was busy (since means nothing
// then).
func (w *worker) state() (phase, since uint64) {
	for {
		phase = w.phase.Load()
		since = w.since.Load()
		if w.phase.Load() == phase {
			return phase, since
		}
	}
}

// startWorker starts a worker goroutine that runs first, if valid, then
// parks on p.work.
func (p *Pool) startWorker(w *worker, first job) {
	p.wg.Add(1)
	go p.runWorker(w, first)
}

// runWorker is the body of a worker goroutine: it runs t, then each task it
// receives on p.work, until it receives the zero job or p.work is closed.
// The dispatcher counts a first task busy in w.phase; the loop below counts
// the others.
func (p *Pool) runWorker(w *worker, t job) {
	defer p.wg.Done()
	returned := false
	defer func() {
		if !returned {
			// A task or the panic handler called runtime.Goexit, which
			// nothing can stop; run has already counted the task. Carry
			// on in a new goroutine so that the pool keeps its capacity.
			p.startWorker(w, job{})
		}
	}()
	if t.valid() {
		p.run(t, w)
	}
	for {
		w.since.Store(p.tick.Load() + 1) // idle from now, for reaping
		t, open := <-p.work
		if !t.valid() {
			if open {
				p.stats.quitsReceived.Add(1)
				if p.wants.Load()&wantTaken != 0 {
					p.signal() // the dispatcher counts workers out
				}
			} else {
				// The dispatcher is exiting and counts down no more.
				p.stats.countOut()
			}
			break
		}
		if wants := p.wants.Load(); wants != 0 && p.attend(wants, t) {
			continue // dropped: a Shutdown deadline has passed, or Stop cut the buffer before t
		}
		w.phase.Store(w.phase.Load() | 1) // busy, then not idle
		w.since.Store(0)
		if t.lane != nil {
			t.lane.stats.started.Add(1)
		}
		p.run(t, w)
	}
	w.since.Store(exitedMark)
	returned = true
}

// attend does what the dispatcher wants of a worker that has just received
// t, and reports whether t must not run.
func (p *Pool) attend(wants uint32, t job) (drop bool) {
	if wants&wantTaken != 0 {
		p.signal() // t left the hand-off buffer
	}
	if wants&watchLate != 0 && p.late(t) {
		p.dropLate(t)
		return true
	}
	return false
}

// late reports whether t, just received from p.work, must not run: a
// Shutdown deadline has passed, or t is at or past the cut that Stop or the
// deadline made in the hand-off buffer (see cutoff).
func (p *Pool) late(t job) bool {
	if dl := p.deadline.Load(); dl != nil {
		select {
		case <-*dl:
			return true
		default:
		}
	}
	if cut := p.cut.Load(); cut != nil {
		<-cut.done
		return t.seq >= cut.seq
	}
	return false
}

// signal wakes the dispatcher, if it is not awake already.
func (p *Pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default: // a signal is pending: it will do
	}
}

// dropLate drops t, which a worker received from the hand-off buffer too
// late to run it (see late): Stop or the deadline dropped the queue, and t
// with it.
func (p *Pool) dropLate(t job) {
	p.stats.abandonedLate.Add(1)
	p.recall(t)
}

// run runs one task and accounts for it, on worker w or, for CallerRuns
// (w == nil), in the submitter. A panic is recovered and reported to the
// task's waiter or the panic handler. The task is counted done before it is
// reported, so that when SubmitWait returns the task is Completed in
// Status, and a panic handler that panics or calls runtime.Goexit cannot
// leave it counted as running.
func (p *Pool) run(t job, w *worker) {
	fn := t.fn
	if t.w != nil {
		fn = t.w.do
	}
	var pe *PanicError
	// Deferred calls run last first: recover, count, report. They run on
	// return, on a panic and on runtime.Goexit alike.
	defer func() {
		switch {
		case t.w != nil:
			t.w.finish(pe.asError())
		case pe != nil:
			p.handlePanic(pe, w != nil)
		}
	}()
	defer func() {
		p.taskDone(w, pe != nil)
		switch {
		case w != nil && (t.lane != nil || t.line != nil):
			p.report(t, pe != nil)
		case w == nil && t.lane != nil: // a sub-pool's task, run by CallerRuns
			t.lane.stats.callerRan.Add(1)
			if pe != nil {
				t.lane.stats.panicked.Add(1) // after callerRan: Panicked <= Completed
			}
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			pe = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	fn()
}

// asError returns pe as an error: nil if pe is nil.
func (pe *PanicError) asError() error {
	if pe == nil {
		return nil
	}
	return pe
}

// taskDone counts a task done on worker w, or in its submitter if w is nil,
// then, if it panicked, as panicked: Panicked is part of Completed. If a
// Pause waits for running tasks, it tells the dispatcher one ended.
func (p *Pool) taskDone(w *worker, panicked bool) {
	if w == nil {
		p.stats.callerRan.Add(1)
		if panicked {
			p.stats.panicked.Add(1)
		}
		return
	}
	w.phase.Store(w.phase.Load() + 1) // done+1, not busy
	if panicked {
		p.stats.panicked.Add(1)
	}
	if p.wants.Load()&wantIdle != 0 {
		p.signal() // a Pause waits for running tasks to end
	}
}

// report tells the dispatcher that t, a keyed or sub-pool task, ended: its
// sub-pool has room under its limit, its key may go again.
func (p *Pool) report(t job, panicked bool) {
	if l := t.lane; l != nil {
		l.stats.ended.Add(1)
		if panicked {
			l.stats.panicked.Add(1) // after ended: Panicked <= Completed
		}
	}
	if line := t.line; line != nil {
		for {
			line.next = p.ended.Load()
			if p.ended.CompareAndSwap(line.next, line) {
				break
			}
		}
	}
	if p.wants.Load()&wantEnds != 0 {
		p.signal()
	}
}

// handlePanic passes a fire-and-forget task's panic to the panic handler.
// A panic in the handler is not recovered: on a worker it ends the
// program, as any unrecovered panic does. In a CallerRuns submitter it
// would unwind into the caller of Submit, which could recover it, so there
// it ends the program from a goroutine of its own.
func (p *Pool) handlePanic(pe *PanicError, onWorker bool) {
	if onWorker {
		p.cfg.panicHandler(pe)
		return
	}
	defer func() {
		if v := recover(); v != nil {
			crash(&handlerPanic{value: v, stack: debug.Stack()})
		}
	}()
	p.cfg.panicHandler(pe)
}

// A handlerPanic is what a panic handler panicked with, under CallerRuns.
type handlerPanic struct {
	value any
	stack []byte
}

func (h *handlerPanic) Error() string {
	return fmt.Sprintf("workerpool: the panic handler panicked: %v\n\n%s", h.value, h.stack)
}

// crash ends the program with an unrecovered panic of v in a new goroutine,
// where no caller can recover it, and blocks the calling goroutine until the
// program has ended.
func crash(v error) {
	go func() { panic(v) }()
	select {}
}
