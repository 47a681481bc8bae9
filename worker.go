package workerpool

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// How a worker's goroutine starts.
type start uint8

const (
	withTask start = iota // with its first task, which the loop took and counted busy
	idle                  // with none: it asks the hand-off for one
	skipped               // with its first task's end to report: its submitter gave up on it
	again                 // in place of a goroutine that a Goexit ended: that task's end is still to report
)

// startWorker starts a goroutine for worker w, as how says. It is called
// by the loop, or by a worker's goroutine that a task's runtime.Goexit
// ends; it is not inlined, so that the worker's stack trace names it (see
// caller).
//
//go:noinline
func (s *state) startWorker(w *worker, e entry, how start) {
	s.live.Add(1)
	go s.runWorker(w, e, how)
}

// runWorker is the body of a worker goroutine: it runs e, if it starts
// with a task, then each task the hand-off gives it, until the hand-off
// tells it to exit.
func (s *state) runWorker(w *worker, e entry, how start) {
	w.current = &e
	if how == again {
		w.goid.Store(goroutineID()) // the loop did not start this goroutine
	}
	returned := false
	defer func() {
		if s.cfg.noRecovery {
			if v := recover(); v != nil {
				// A task's panic goes on up, and ends the program, before
				// the worker counts as exited: see run.
				panic(v)
			}
		} else if v := recover(); v != nil {
			// The panic handler panicked (a task's own panic is recovered
			// in run). That ends the program; until it has, this worker
			// must not count as exited, or StopWait could return, and the
			// program go on, first.
			crash(&handlerPanic{value: v, stack: debug.Stack()})
		}
		switch {
		case returned:
		case w.leaving:
			// A close of its states, or the panic handler, called
			// runtime.Goexit as the worker left: finish leaving.
			s.startExit(w)
		default:
			// A task, the panic handler or the task observer called
			// runtime.Goexit, which nothing can stop; run has counted the
			// task. Carry on in a new goroutine, which reports its end, so
			// that the pool keeps its capacity.
			s.startWorker(w, e, again)
		}
		s.gone()
	}()
	ran := how != idle
	l := s.laneOf(&e)
	if how == withTask {
		if e.Key != nil || l != nil {
			s.knowGoroutine(w)
		}
		s.run(&e, w, l)
	}
	for {
		// Next clears e: the worker keeps nothing of its last task while it
		// waits, neither its closure nor its queue, whose stopped sub-pool
		// would stay with it.
		next, ok := s.hand.Next(&w.seat, ran, &e, ran && (e.Key != nil || l != nil))
		if !ok {
			break
		}
		e, ran = next, true
		l = s.laneOf(&e)
		s.runTask(w, &e, l)
	}
	s.exit(w)
	returned = true
}

// runTask runs e, a task of lane l (nil: the pool's own queue), which the
// hand-off gave to worker w, unless its submitter gave up on it.
func (s *state) runTask(w *worker, e *entry, l *lane) {
	if e.W != nil && !e.W.take() {
		s.skip(w, e, l)
		return
	}
	w.phase.Store(w.phase.Load() | 1) // busy
	if l != nil {
		l.stats.started.Add(1)
	}
	if e.Key != nil || l != nil {
		s.knowGoroutine(w)
	}
	s.run(e, w, l)
}

// knowGoroutine records the number of w's goroutine, the first time w
// runs a task whose place or key a stop from inside it may lend.
func (s *state) knowGoroutine(w *worker) {
	if w.goid.Load() == 0 {
		w.goid.Store(goroutineID())
	}
}

// skip accounts for e, a task its submitter gave up on before worker w
// could start it: the worker counts it skipped, not run, and Canceled.
func (s *state) skip(w *worker, e *entry, l *lane) {
	if l != nil {
		l.stats.skipped.Add(1)
	}
	s.noteCanceled(e.W, l)
	w.skipped.Store(w.skipped.Load() + 1)
}

// exit ends worker w for good, already counted out of the hand-off: it
// closes the worker's states and takes it off the crew. From here on, a
// Goexit (from a close, or the panic handler of its panic) does not bring
// the worker back: startExit finishes leaving.
func (s *state) exit(w *worker) {
	w.leaving = true
	s.closeLocals(w)
	s.crew.leave(w)
}

// startExit finishes worker w's exit in a goroutine of its own, after a
// Goexit cut it short. It is not inlined, so that the goroutine's stack
// trace names it (see caller).
//
//go:noinline
func (s *state) startExit(w *worker) {
	s.live.Add(1)
	go func() {
		defer s.gone()
		w.goid.Store(goroutineID()) // it runs the worker's closes
		s.exit(w)
	}()
}

// run runs the task of h and accounts for it, on worker w or, for
// CallerRuns (w == nil), in the submitter. A panic is recovered and
// reported to the task's waiter or the panic handler, and so is a task
// that could not run because its worker's state could not be opened. The
// task is counted done before it is reported, so that when SubmitWait
// returns the task is Completed in Status, and a panic handler that panics
// or calls runtime.Goexit cannot leave it counted as running. The deferred
// call runs on return, on a panic and on runtime.Goexit alike.
func (s *state) run(h *entry, w *worker, l *lane) {
	var start int64
	if s.cfg.timings {
		start = s.now()
	}
	// A task with no waiter takes its panic to the panic handler.
	handler := h.W == nil || isFireAndForget(h.W)
	var notRun error
	defer func() {
		var pe *PanicError
		if s.cfg.noRecovery {
			if v := recover(); v != nil && w != nil {
				// The panic goes on up and ends the program, as without
				// a pool. Nothing of the pool hears of it, so that
				// nothing that waits on the task or the pool (a
				// SubmitWait, a StopWait) returns, and lets the program
				// exit, first.
				panic(v)
			} else if v != nil {
				// In its submitter, under CallerRuns, the panic goes up
				// to the caller of Submit, which may recover it: the task
				// counts as done.
				defer panic(v)
			}
		} else if v := recover(); v != nil {
			pe = &PanicError{Value: v, Stack: debug.Stack()}
		} else if notRun != nil && handler {
			pe = &PanicError{Value: notRun} // not a panic: not counted as one
		}
		s.taskDone(w, l, pe != nil && notRun == nil)
		if start != 0 {
			s.timeTask(h, l, start, pe != nil && notRun == nil)
		}
		switch {
		case pe != nil && handler:
			s.handlePanic(pe, w)
		case h.W != nil:
			h.W.finish(pe.asError())
		}
	}()
	if h.W == nil {
		h.Fn()
		return
	}
	var states *locals // a task run in its submitter has no worker, and no states
	if w != nil {
		states = &w.locals
	}
	notRun = h.W.do(states)
}

// taskDone counts a task of lane l (nil: the pool's own queue) done, on
// worker w or in its submitter if w is nil, then, if it panicked, as
// panicked: Panicked is part of Completed.
func (s *state) taskDone(w *worker, l *lane, panicked bool) {
	if w == nil {
		s.stats.callerRan.Add(1)
		if panicked {
			s.stats.panicked.Add(1)
		}
		return
	}
	if l != nil {
		l.stats.ended.Add(1)
		if panicked {
			l.stats.panicked.Add(1) // after ended: Panicked <= Completed
		}
	}
	w.phase.Store(w.phase.Load() + 1) // done+1, not busy
	if panicked {
		s.stats.panicked.Add(1)
	}
}

// handlePanic passes a fire-and-forget task's panic to the panic handler,
// on worker w or, if w is nil, in a CallerRuns submitter. A panic in the
// handler ends the program from a goroutine of its own: on a worker, once
// runWorker sees it (before the worker counts as exited); in a submitter
// at once, as it would otherwise unwind into the caller of Submit, which
// could recover it.
func (s *state) handlePanic(pe *PanicError, w *worker) {
	if w != nil {
		s.cfg.panicHandler(pe)
		return
	}
	defer func() {
		if v := recover(); v != nil {
			crash(&handlerPanic{value: v, stack: debug.Stack()})
		}
	}()
	s.cfg.panicHandler(pe)
}

// A handlerPanic is what a panic handler panicked with.
type handlerPanic struct {
	value any
	stack []byte
}

func (h *handlerPanic) Error() string {
	return fmt.Sprintf("workerpool: the panic handler panicked: %v\n\n%s", h.value, h.stack)
}

// crash ends the program with an unrecovered panic of v in a new goroutine,
// where no caller can recover it, and blocks the calling goroutine until
// the program has ended.
func crash(v error) {
	go func() { panic(v) }()
	select {}
}

// Telling the pool's workers from other goroutines. Go gives goroutines no
// identity, on purpose; but a stop called from one of the pool's own
// workers (in a task, the panic handler, the task observer, a Local's open
// or close) must not wait for that worker, which would wait for itself,
// and should lend it place while it waits. So such calls read their
// caller's stack trace: its first line gives the goroutine's number, its
// last the function that started it and the goroutine that called that
// function. A worker's goroutine is started by startWorker, from the loop,
// whose number the loop learns when first asked, or from the goroutine of
// a worker that a Goexit ended; such a worker records its own number, as
// do workers before their first task of a sub-pool or with a key (the
// places a stop lends), and the goroutine that finishes a worker's exit
// (startExit). Reading a stack costs a few microseconds, so only those
// calls do it, and only while the pool has goroutines.

// whoCalls reads the calling goroutine's stack trace, and reports whether
// it may be one of the pool's workers, for the loop to tell (loop.isOurs).
func (s *state) whoCalls() (caller, bool) {
	if s.live.Load() == 0 {
		return caller{}, false // the pool has no goroutine
	}
	stack := ownStack()
	id, fn, by := stackIDs(stack)
	c := caller{id: id, by: by, started: fn == startWorkerName || fn == startExitName, leaving: leaving(stack)}
	return c, c.started
}

// lend tells the loop, if the caller is one of the pool's workers, that it
// waits on the pool: the loop does not wait for it to exit, and it lends
// its place (see loop.lend). It returns the loop's answer, for reclaim to
// end the wait: isWorker says whether the caller is one of the pool's
// workers, and lentLane which sub-pool's place it lent, if any.
func (s *state) lend() *request {
	c, maybe := s.whoCalls()
	r := &request{kind: lendRequest, caller: c, done: make(chan struct{})}
	if maybe && s.request(r) {
		<-r.done
	}
	return r
}

// reclaim ends the wait that lend began: the worker takes its place back.
func (s *state) reclaim(lent *request) {
	if lent.isWorker {
		s.request(&request{kind: reclaimRequest, caller: lent.caller, isWorker: true})
	}
}

// leaving reports whether a worker whose stack trace is stack is leaving:
// in closeLocals, in a Local's close or the panic handler of one, it was
// counted out already. (closeLocals is one of the outermost frames, which
// a trace keeps however deep the stack.)
func leaving(stack []byte) bool {
	return strings.Contains(string(stack), "\n"+closeLocalsName)
}

// The names of the functions that start the goroutines of workers, and of
// the one that leaving looks for, as stack traces print them.
var (
	startWorkerName = funcName((*state).startWorker)
	startExitName   = funcName((*state).startExit)
	closeLocalsName = funcName((*state).closeLocals)
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

// timeTask records the timing of the task of h, of lane l, accepted at h.Accepted
// (0: it never waited, having run in its submitter), started at start and
// ended now, and hands it to the observer.
func (s *state) timeTask(h *entry, l *lane, start int64, panicked bool) {
	accepted := h.Accepted
	if accepted == 0 {
		accepted = start
	}
	tt := TaskTiming{
		Level:    int(h.Level),
		Wait:     time.Duration(start - accepted),
		Run:      time.Duration(s.now() - start),
		Panicked: panicked,
	}
	s.timings.wait.add(tt.Wait)
	s.timings.run.add(tt.Run)
	s.timings.levels.add(h.Level, tt.Wait)
	if l != nil {
		tt.Subpool = l.sub.Value()
		l.timings.wait.add(tt.Wait)
		l.timings.run.add(tt.Run)
		l.timings.levels.add(h.Level, tt.Wait)
	}
	if s.cfg.observer != nil {
		s.cfg.observer(tt)
	}
}

// closeLocals closes worker w's states, each once: it takes a state off
// the worker before it closes it, so that a close that calls Goexit, or
// whose panic's handler does, leaves the others to be closed, and that one
// closed. A panic of close goes to the panic handler.
func (s *state) closeLocals(w *worker) {
	for len(w.locals.values) > 0 {
		v := w.locals.values[0]
		w.locals.values = w.locals.values[1:]
		func() {
			defer func() {
				if s.cfg.noRecovery {
					return // a close's panic goes on up, as a task's does
				}
				if r := recover(); r != nil {
					s.cfg.panicHandler(&PanicError{Value: r, Stack: debug.Stack()})
				}
			}()
			v.close(v.value)
		}()
	}
	w.locals.values = nil
}
