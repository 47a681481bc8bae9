package workerpool

import (
	"fmt"
	"runtime/debug"
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

// A worker is the record of one worker: what the dispatcher reads to reap
// it, and what Status sums. Only the worker's own goroutine writes it once
// it runs, with plain stores: no two goroutines contend for it, and a task
// costs no atomic read-modify-write.
type worker struct {
	// phase is done<<1 | busy: the tasks the worker finished, and whether
	// it holds one now. It only grows: receiving a task sets busy, and
	// counting it done (phase+1) clears busy and adds one to done. Status
	// reads Busy and Completed from this one word, so they agree.
	phase atomic.Uint64
	// since is 1 + the reaping clock's tick (Pool.tick) when the worker
	// last went idle; 0 while it is not free, though not busy: in the
	// panic handler or the task observer, or reporting a keyed task's end;
	// quitMark or retiredMark once it has left for good. It changes from one stamp to
	// another only while phase is odd (busy), so a reader that sees the
	// same even phase before and after reading since has the stamp of the
	// idle period that phase belongs to, or 0 (not idle).
	since atomic.Uint64
	// skipped counts the tasks the worker received but did not run, because
	// their submitters gave up on them first.
	skipped atomic.Uint64
	// locals holds the worker's states of Locals, and leaving its mark
	// once it is leaving for good (see exit); only its goroutine touches
	// them.
	locals  locals
	leaving uint64
	// Each worker's record on its own cache line: workers write theirs on
	// every task, and would otherwise slow each other down.
	_ [cacheLine - 56]byte
}

// cacheLine is the size of a cache line on the machines Go mostly runs on.
const cacheLine = 64

// The marks of a worker that has left: it received a quit, or it retired
// after its task because the maximum fell, or the pool closed.
const (
	quitMark    = ^uint64(0)
	retiredMark = ^uint64(0) - 1
)

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

// startWorker starts a worker goroutine that runs h first, if it is a task,
// then the tasks it receives.
func (p *Pool) startWorker(w *worker, h handOff) {
	p.wg.Add(1)
	go p.runWorker(w, h)
}

// runWorker is the body of a worker goroutine: it runs h, then each task
// it receives on Pool.work and claims, until it receives a quit, Pool.work
// is closed, or it retires because the pool has more workers than its
// maximum.
func (p *Pool) runWorker(w *worker, h handOff) {
	defer p.wg.Done()
	returned := false
	defer func() {
		if v := recover(); v != nil {
			// The panic handler panicked (a task's own panic is recovered
			// in run). That ends the program; until it has, this worker
			// must not count as exited, or StopWait could return, and the
			// program go on, first.
			crash(&handlerPanic{value: v, stack: debug.Stack()})
		}
		switch {
		case returned:
		case w.leaving != 0:
			// A close of its states, or the panic handler, called
			// runtime.Goexit as the worker left: finish leaving.
			p.startExit(w, w.leaving)
		default:
			// A task or the panic handler called runtime.Goexit, which
			// nothing can stop; run has already counted the task. Carry
			// on in a new goroutine so that the pool keeps its capacity.
			p.startWorker(w, handOff{})
		}
	}()
	counted := h.kind == runTask // the dispatcher counted a first task busy
	for {
		switch {
		case h.kind != runTask:
			p.stampIdle(w)
		case !counted && h.w != nil && !h.w.take():
			p.skip(w, &h) // its submitter gave up on it
		default:
			if !counted {
				w.phase.Store(w.phase.Load() | 1) // busy
				if h.sub != nil {
					h.sub.stats.started.Add(1)
				}
			}
			p.run(&h, w)
		}
		counted = false
		// A worker the maximum no longer has room for leaves before it
		// takes another task, also after a task that called Goexit.
		if p.wants.Load()&wantRetire != 0 && p.stats.retireOne() {
			p.exit(w, retiredMark)
			break
		}
		var open bool
		h, open = <-p.work
		switch {
		case !open:
			p.stats.countOut() // the dispatcher is winding down and counts no more
			p.exit(w, quitMark)
		case h.kind == quit:
			p.exit(w, quitMark)
		default:
			if h.claim != nil {
				var ok bool
				if h.task, ok = h.claim.claim(h.sent); !ok {
					h = handOff{} // revoked: the dispatcher holds the task again
				}
			}
			if p.wants.Load()&wantReceipts != 0 {
				p.signal() // the dispatcher waits for room in the buffer, or for claims
			}
			continue
		}
		break
	}
	returned = true
}

// exit ends worker w for good, already counted out: it closes the worker's
// states, marks its record (quitMark or retiredMark) and tells the
// dispatcher, which may be waiting for workers to leave. From here on, a
// Goexit (from a close, or the panic handler of its panic) does not bring
// the worker back: startExit finishes leaving.
func (p *Pool) exit(w *worker, mark uint64) {
	w.leaving = mark
	p.closeLocals(w)
	w.since.Store(mark)
	p.signal()
}

// startExit finishes worker w's exit in a goroutine of its own, after a
// Goexit cut it short.
func (p *Pool) startExit(w *worker, mark uint64) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.exit(w, mark)
	}()
}

// skip accounts for h, a task its submitter gave up on before worker w
// could start it: the worker counts it skipped, not run, and the scheduler
// learns it is no longer running.
func (p *Pool) skip(w *worker, h *handOff) {
	// As in taskDone: report, count, then look at what the dispatcher
	// wants, so that a Pause waiting for this hand-off hears of it.
	reported := h.mustReport()
	if reported {
		p.reports.add(h.entry)
	}
	w.skipped.Store(w.skipped.Load() + 1)
	if wants := p.wants.Load(); wants&wantIdle != 0 || reported && wants&wantEnds != 0 {
		p.signal()
	}
}

// stampIdle stamps w idle from now, for reaping: with the reaping clock's
// tick, plus one. The tick moves once an idle timeout, so a worker mostly
// finds its stamp already right.
func (p *Pool) stampIdle(w *worker) {
	if s := p.tick.Load() + 1; w.since.Load() != s {
		w.since.Store(s)
	}
}

// freed stamps w idle from now, once its panic handler or task observer
// has returned, and tells the dispatcher if it waits for a free worker: w
// was not free while its task's end was signalled.
func (p *Pool) freed(w *worker) {
	p.stampIdle(w)
	if p.wants.Load()&wantIdle != 0 {
		p.signal()
	}
}

// signal wakes the dispatcher, if it is not awake already.
func (p *Pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default: // a signal is pending: it will do
	}
}

// run runs the task of h and accounts for it, on worker w or, for
// CallerRuns (w == nil), in the submitter. A panic is recovered and
// reported to the task's waiter or the panic handler, and so is a task that
// could not run because its worker's state could not be opened. The task is
// counted done before it is reported, so that when SubmitWait returns the
// task is Completed in Status, and a panic handler that panics or calls
// runtime.Goexit cannot leave it counted as running. The deferred call runs
// on return, on a panic and on runtime.Goexit alike.
func (p *Pool) run(h *handOff, w *worker) {
	var start int64
	if p.cfg.timings {
		start = p.now()
	}
	// A task with no waiter takes its panic to the panic handler.
	handler := h.w == nil || isFireAndForget(h.w)
	var notRun error
	defer func() {
		var pe *PanicError
		if v := recover(); v != nil {
			pe = &PanicError{Value: v, Stack: debug.Stack()}
		} else if notRun != nil && handler {
			pe = &PanicError{Value: notRun} // not a panic: not counted as one
		}
		toHandler := pe != nil && handler
		p.taskDone(h, w, pe != nil && notRun == nil, toHandler || p.cfg.observer != nil)
		if start != 0 {
			p.timeTask(h, start, pe != nil && notRun == nil)
		}
		switch {
		case toHandler:
			p.handlePanic(pe, w) // idle from when the handler returns
		case h.w != nil:
			h.w.finish(pe.asError())
		}
		if w != nil && !toHandler && p.cfg.observer != nil {
			p.freed(w) // idle from when the observer returned
		}
	}()
	if h.w == nil {
		h.fn()
		return
	}
	var l *locals // a task run in its submitter has no worker, and no states
	if w != nil {
		l = &w.locals
	}
	notRun = h.w.do(l)
}

// asError returns pe as an error: nil if pe is nil.
func (pe *PanicError) asError() error {
	if pe == nil {
		return nil
	}
	return pe
}

// taskDone counts the task of h done, on worker w or in its submitter if w
// is nil, then, if it panicked, as panicked: Panicked is part of
// Completed. A sub-pool's or a keyed task's end is reported to the
// dispatcher; if a Pause waits for running tasks, the dispatcher is told.
// occupied says that the panic handler or the task observer is to run
// next, on the worker.
//
// The worker is stamped idle before it is counted not busy, so that Status
// and reaping never see it idle with the stamp of an earlier idle period;
// but not while the panic handler or the observer is to run: that is not
// idle, and the worker is not free to take a task.
func (p *Pool) taskDone(h *handOff, w *worker, panicked, occupied bool) {
	if w == nil {
		p.stats.callerRan.Add(1)
		if panicked {
			p.stats.panicked.Add(1)
		}
		return
	}
	// A worker that ran a keyed task is not free until it has reported
	// the end that frees the key, so that a loop that sees it free finds
	// the report, and hands out the key's next task before the tasks
	// behind it (see fill).
	reported, keyed := h.mustReport(), h.line != nil
	if occupied || keyed {
		w.since.Store(0) // not free: stamped after the report, handler or observer
	} else {
		p.stampIdle(w)
	}
	if h.sub != nil {
		h.sub.stats.ended.Add(1)
		if panicked {
			h.sub.stats.panicked.Add(1) // after ended: Panicked <= Completed
		}
	}
	w.phase.Store(w.phase.Load() + 1) // done+1, not busy
	if panicked {
		p.stats.panicked.Add(1)
	}
	// Count the task done, then report its end, so that a sub-pool's Stop
	// that the report lets return sees it done; then look at what the
	// dispatcher wants to hear: it sets wantEnds before it last collects
	// reports, so either it collects this one or the worker sees wantEnds
	// and wakes it.
	if reported {
		p.reports.add(h.entry)
	}
	if keyed && !occupied {
		p.stampIdle(w)
	}
	if wants := p.wants.Load(); wants&wantIdle != 0 || reported && wants&wantEnds != 0 {
		p.signal() // a Pause or a free worker is awaited, or the report is
	}
}

// handlePanic passes a fire-and-forget task's panic to the panic handler,
// on worker w or, if w is nil, in a CallerRuns submitter. A panic in the
// handler ends the program from a goroutine of its own: on a worker, once
// runWorker sees it (before the worker counts as exited); in a submitter
// at once, as it would otherwise unwind into the caller of Submit, which
// could recover it.
func (p *Pool) handlePanic(pe *PanicError, w *worker) {
	if w != nil {
		p.cfg.panicHandler(pe)
		p.freed(w)
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
