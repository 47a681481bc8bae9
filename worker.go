package workerpool

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
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
	// panic handler or the task observer, or reporting a task's end;
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
	// id is the number of the worker's goroutine if the dispatcher did not
	// start it (see onWorker), else 0.
	id atomic.Uint64
	// Each worker's record on its own cache line: workers write theirs on
	// every task, and would otherwise slow each other down.
	_ [cacheLine - 64]byte
}

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

// startWorker starts a worker goroutine that runs e first, if first is
// set, then the tasks it receives. It is called by the dispatcher, or by a
// worker's goroutine that ends as a task calls runtime.Goexit
// (restarted); it is not inlined, so that the worker's stack trace names
// it (see onWorker).
//
//go:noinline
func (p *Pool) startWorker(w *worker, e entry, first, restarted bool) {
	p.live.Add(1)
	go p.runWorker(w, e, first, restarted)
}

// runWorker is the body of a worker goroutine: it runs e, if first is set,
// then each task it receives on Pool.work and claims, until it receives a
// quit or Pool.work is closed.
func (p *Pool) runWorker(w *worker, e entry, first, restarted bool) {
	defer p.gone()
	if restarted {
		w.id.Store(goroutineID()) // it was not started by the dispatcher
	}
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
			p.startWorker(w, entry{}, false, true)
		}
	}()
	switch {
	case first:
		// The dispatcher counted it busy and started, and took it for the
		// pool from its submitter.
		p.run(&e, w)
	case restarted:
		// Free: a worker whose panic handler or task observer called
		// Goexit was not, and the loop may wait for it.
		p.freed(w)
	default:
		p.stampIdle(w) // the dispatcher stamped it as it started it
	}
	for {
		h, open := <-p.work
		if !open {
			p.stats.countOut() // the dispatcher is winding down and counts no more
			break
		}
		if h.slot == nil {
			if h.n == retire {
				if !p.stats.retireOne() {
					continue // the maximum has room for it again
				}
				p.exit(w, retiredMark)
				returned = true
				return
			}
			break // a quit
		}
		e, ok := h.slot.claim(h.n)
		if p.listening.Load() {
			p.signal() // a hand-off was claimed or dropped: room in the buffer
		}
		switch {
		case !ok:
			// Revoked: the dispatcher holds the task again.
		case e.w != nil && !e.w.take():
			p.skip(w, &e) // its submitter gave up on it
		default:
			w.phase.Store(w.phase.Load() | 1) // busy
			if sub := subpoolOf(e.lane); sub != nil {
				sub.stats.started.Add(1)
			}
			p.run(&e, w)
		}
	}
	p.exit(w, quitMark)
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
	p.live.Add(1)
	go func() {
		defer p.gone()
		w.id.Store(goroutineID()) // it runs the worker's closes
		p.exit(w, mark)
	}()
}

// gone counts a goroutine of the pool out, as its last act, and tells the
// dispatcher, which may be waiting for it.
func (p *Pool) gone() {
	if p.live.Add(-1) == 0 && p.ended.Load() {
		p.closeExited() // the last stopper to exit
	}
	p.signal()
}

// closeExited closes Pool.exited, once: every goroutine the pool started
// has exited, the dispatcher's included.
func (p *Pool) closeExited() {
	if p.exitedClosed.CompareAndSwap(false, true) {
		close(p.exited)
	}
}

// skip accounts for h, a task its submitter gave up on before worker w
// could start it: the worker counts it skipped, not run, and the scheduler
// learns it is no longer running.
func (p *Pool) skip(w *worker, e *entry) {
	// As in taskDone: report, count, then look whether the dispatcher
	// listens, so that a Pause waiting for this hand-off hears of it.
	if sub := subpoolOf(e.lane); sub != nil {
		sub.stats.skipped.Add(1)
	}
	p.reports.add(report{lane: e.lane, line: e.line, ended: e.mustReport(), skipped: e.w})
	w.skipped.Store(w.skipped.Load() + 1)
	if p.listening.Load() {
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
// has returned, and tells the dispatcher if it listens: w was not free
// while its task's end was signalled.
func (p *Pool) freed(w *worker) {
	p.stampIdle(w)
	if p.listening.Load() {
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
func (p *Pool) run(h *entry, w *worker) {
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
func (p *Pool) taskDone(h *entry, w *worker, panicked, occupied bool) {
	if w == nil {
		p.stats.callerRan.Add(1)
		if panicked {
			p.stats.panicked.Add(1)
		}
		return
	}
	// A worker that ran a keyed or a sub-pool's task is not free until it
	// has reported the end that frees the key or the place, so that a
	// loop that sees it free finds the report: it hands out the key's
	// next task before the tasks behind it (see fill), and it knows a
	// queue held back by nothing but stoppers (see checkStranded).
	reported := h.mustReport()
	sub := subpoolOf(h.lane)
	if occupied || reported {
		w.since.Store(0) // not free: stamped after the report, handler or observer
	} else {
		p.stampIdle(w)
	}
	if sub != nil {
		sub.stats.ended.Add(1)
		if panicked {
			sub.stats.panicked.Add(1) // after ended: Panicked <= Completed
		}
	}
	w.phase.Store(w.phase.Load() + 1) // done+1, not busy
	if panicked {
		p.stats.panicked.Add(1)
	}
	// Count the task done, then report its end, so that a sub-pool's Stop
	// that the report lets return sees it done; then look whether the
	// dispatcher listens: it listens before it last collects reports, so
	// either it collects this one or the worker sees it listening and
	// wakes it.
	if reported {
		p.reports.add(report{lane: h.lane, line: h.line, ended: true})
	}
	if reported && !occupied {
		p.stampIdle(w)
	}
	if sub != nil && p.ended.Load() {
		sub.noteLastEnded() // a sub-pool's stop may wait for it, the loop gone
	}
	if p.listening.Load() {
		p.signal() // a Pause, a stop or a free worker is awaited, or the report is
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

// Stops from inside. Stop, StopWait and Shutdown wait for the pool's
// goroutines to exit; called from one of the pool's own workers (in a
// task, the panic handler, the task observer, a Local's open or close),
// they would wait for their own. So they ask first whether their caller is
// one: a goroutine's stack trace ends with the function that started it
// and the number of the goroutine that called it. A worker is started by
// startWorker, from the dispatcher, whose number the pool records as it
// starts, or from a worker's goroutine that ends as a task calls
// runtime.Goexit; the worker that goroutine starts records its own number
// (worker.id), as does the goroutine that finishes a worker's exit. Go
// gives no cheaper way to tell goroutines apart, and this one costs a few
// microseconds only where it is rare: once per pool, once per Goexit, and
// in each Stop, StopWait and Shutdown. The same trace says whether the
// worker is leaving (see leaving).

// stopper tells the dispatcher, if the calling goroutine is one of p's
// workers, not to wait for it to exit, nor to count it against the maximum
// while it waits for the pool to stop: so the others can run the queue, and
// the stop end. The worker exits once it returns to the pool. It reports
// whether the caller is a worker.
func (p *Pool) stopper() bool {
	stack := ownStack()
	if !p.onWorker(stack) {
		return false
	}
	p.request(&request{kind: stopperRequest, leaving: leaving(stack)})
	return true
}

// leaving reports whether a worker whose stack trace is stack is leaving:
// in closeLocals, in a Local's close or the panic handler of one, it was
// counted out of the maximum already. (closeLocals is one of the
// outermost frames, which a trace keeps however deep the stack.)
func leaving(stack []byte) bool {
	return strings.Contains(string(stack), "\n"+closeLocalsName)
}

// onWorker reports whether the goroutine whose stack trace is stack is one
// of p's workers.
func (p *Pool) onWorker(stack []byte) bool {
	id, fn, by := stackIDs(stack)
	if by == p.dispatcherID.Load() && (fn == startWorkerName || fn == startExitName) {
		return true
	}
	if reg := p.stats.reg.Load(); reg != nil {
		for _, w := range reg.workers {
			if w.id.Load() == id {
				return true
			}
		}
	}
	return false
}

// The names of the functions that start the goroutines of workers, and of
// the one that leaving looks for, as stack traces print them.
var (
	startWorkerName = funcName((*Pool).startWorker)
	startExitName   = funcName((*Pool).startExit)
	closeLocalsName = funcName((*Pool).closeLocals)
)

func funcName(f any) string {
	return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
}

// goroutineID returns the calling goroutine's number.
func goroutineID() uint64 {
	var buf [64]byte
	id, _, _ := stackIDs(buf[:runtime.Stack(buf[:], false)])
	return id
}

// ownStack returns the calling goroutine's whole stack trace.
func ownStack() []byte {
	buf := make([]byte, 4096)
	for {
		n := runtime.Stack(buf, false)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// stackIDs reads a goroutine's stack trace, as runtime.Stack prints it:
// the goroutine's number, from its first line ("goroutine 7 [running]:"),
// and, from its last ("created by pkg.f in goroutine 1"), the function
// that started it and the number of the goroutine that called that
// function: 0 and "" where the trace is cut short.
func stackIDs(stack []byte) (id uint64, fn string, by uint64) {
	s := string(stack)
	id = leadingNumber(strings.TrimPrefix(s, "goroutine "))
	const created = "\ncreated by "
	i := strings.LastIndex(s, created)
	if i < 0 {
		return id, "", 0
	}
	line, _, _ := strings.Cut(s[i+len(created):], "\n")
	fn, in, ok := strings.Cut(line, " in goroutine ")
	if !ok {
		return id, "", 0
	}
	return id, fn, leadingNumber(in)
}

// leadingNumber returns the decimal number at the start of s, or 0.
func leadingNumber(s string) uint64 {
	var n uint64
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}
