package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

// FuzzPool checks the pool's invariants against a model, over sequences of
// operations decoded from the fuzz input (see decodeFuzzConfig and
// fuzzModel.step for the encoding):
//
//   - never more tasks run on the workers than the current maximum, and none
//     starts while a Pause is in force;
//   - every accepted task ran exactly once, or was returned by Stop (or an
//     expired Shutdown), or its SubmitWait caller got ErrStopped; a refused
//     task never runs;
//   - each call returns what its documentation allows, and SubmitWait
//     returns only after its task ran;
//   - at rest Status balances and agrees with the model's counts;
//   - no caller stays blocked once nothing can hold it up, and at the end no
//     goroutine is left.
//
// Each input runs in a synctest bubble, on a fake clock: a deadlock or a
// leaked goroutine fails it. Blocking calls run in their own goroutines, and
// synctest.Wait lets the pool settle after each step. The scheduler still
// chooses among ready select cases at random, so a failing input may need a
// few runs to fail again; the invariants hold for every choice.
func FuzzPool(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) {
			runFuzzModel(t, data)
		})
	})
}

// maxFuzzOps bounds the operations one input runs, so that an execution
// takes a millisecond or so.
const maxFuzzOps = 64

// The operations, one byte each: the low 4 bits select it, the high 4 bits
// are its argument (arg).
const (
	opSubmit        = iota // Submit a task of kind arg%5
	opSubmitWait           // SubmitWait, in its own goroutine
	opTrySubmit            // TrySubmit
	opSubmitCtxDone        // SubmitCtx with a cancelled context
	opSubmitCtx            // SubmitCtx with a context that expires after 1+arg/5 s
	opRelease              // release the (arg % open)-th still-blocked task
	opReleaseAll           // release every blocked task
	opPause                // Pause with a context that opResume cancels
	opResume               // cancel the oldest Pause context not yet cancelled
	opResize               // Resize to a size in max(1,min)..4 chosen by arg
	opAdvance              // advance the fake clock by fuzzAdvance[arg%5]
	opStop                 // Stop
	opStopWait             // StopWait
	opShutdown             // Shutdown; arg odd: with a deadline of fuzzDeadline[arg/2%4]
	opBurst                // Submit 1+arg%4 tasks of kind fuzzBurstKinds[arg/4]
	opTogether             // run the next two operations without settling in between
)

// The kinds of task, chosen by an operation's argument.
type taskKind int

const (
	kindQuick  taskKind = iota // returns at once
	kindPanic                  // panics with a fuzzPanic
	kindGoexit                 // calls runtime.Goexit
	kindBlock                  // blocks until an opRelease or the end
	kindSleep                  // sleeps one second of fake time
)

func (k taskKind) String() string {
	return [...]string{"quick", "panic", "goexit", "block", "sleep"}[k]
}

var (
	fuzzAdvance = [...]time.Duration{time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}
	// A deadline of 0 has passed when Shutdown is called.
	fuzzDeadline = [...]time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second}
	// An idle timeout of 0 is DefaultIdleTimeout.
	fuzzIdle       = [...]time.Duration{-1, time.Second, 0, 3 * time.Second}
	fuzzBurstKinds = [...]taskKind{kindQuick, kindBlock, kindSleep, kindPanic}
)

// fuzzConfig is the pool configuration, decoded from the first three bytes.
type fuzzConfig struct {
	max, min, bound int
	overflow        workerpool.Overflow
	idle            time.Duration // as passed to WithIdleTimeout
	final           int           // how the run ends: 0 Stop, 1 StopWait, 2 Shutdown, 3 Shutdown with a deadline
}

// decodeFuzzConfig reads the configuration: byte 0 holds max-1 (2 bits) and
// the overflow policy; byte 1 min (3 bits, taken mod max+1), the queue bound
// (2 bits, 0 unbounded) and the idle timeout (2 bits, fuzzIdle); byte 2 the
// final stop (2 bits).
func decodeFuzzConfig(b [3]byte) fuzzConfig {
	c := fuzzConfig{
		max:      1 + int(b[0]&3),
		overflow: workerpool.Overflow(int(b[0]>>2) % 3),
		bound:    int(b[1]>>3) & 3,
		idle:     fuzzIdle[b[1]>>5&3],
		final:    int(b[2] & 3),
	}
	c.min = int(b[1]&7) % (c.max + 1)
	return c
}

func (c fuzzConfig) String() string {
	return fmt.Sprintf("New(%d, min %d, bound %d, %v, idle %v), final stop %d", c.max, c.min, c.bound, c.overflow, c.idle, c.final)
}

// fuzzPanic is what a kindPanic task panics with.
type fuzzPanic struct{ task *fuzzTask }

// The ways to submit.
type submitMethod int

const (
	viaSubmit submitMethod = iota
	viaSubmitWait
	viaTrySubmit
	viaSubmitCtxDone
	viaSubmitCtx
)

func (m submitMethod) String() string {
	return [...]string{"Submit", "SubmitWait", "TrySubmit", "SubmitCtx(cancelled)", "SubmitCtx"}[m]
}

// A fuzzTask is the model's record of one submitted task.
type fuzzTask struct {
	id     int
	kind   taskKind
	method submitMethod
	gate   chan struct{} // kindBlock: closed to release it
	opened bool          // gate closed; owned by the driver

	runs     atomic.Int32 // times the task started
	started  time.Time    // when, on the fake clock; written before finished
	startSeq int64        // its place among the starts on workers, from 1; 0 if none

	// When its submission was launched and when it was first seen to have
	// returned, in settles (see fuzzModel.settles).
	launched, seen int
	finished       atomic.Bool // its body returned, panicked or called Goexit

	// The submission's outcome, written by its goroutine before op.done.
	resolved bool
	err      error
	goexited bool // the submitting goroutine ended in the task's Goexit (CallerRuns)

	returned int // times Stop handed it back; counted at the end
}

// accepted reports whether the pool took the task, as far as its resolved
// submission tells (a SubmitWait that got ErrStopped may have been accepted
// and then dropped: see finish).
func (tk *fuzzTask) accepted() bool {
	return tk.resolved && (tk.err == nil || tk.goexited || errors.As(tk.err, new(*workerpool.PanicError)))
}

// A fuzzOp is a call the driver made in its own goroutine.
type fuzzOp struct {
	desc string
	done atomic.Bool
	// free, if not nil, reports at rest whether nothing can hold the call
	// up any more, so that it must have returned.
	free func() bool
}

// A fuzzPause is one Pause call and its context.
type fuzzPause struct {
	cancel    context.CancelFunc
	cancelled bool // guarded by fuzzModel.mu
	held      bool // Pause returned and is in force; guarded by fuzzModel.mu
}

// A fuzzStop is one Stop, StopWait or Shutdown call.
type fuzzStop struct {
	op       *fuzzOp
	kind     int // opStop, opStopWait or opShutdown
	deadline bool
	at       time.Time   // when the deadline passes
	tasks    []func()    // what it returned; written before op.done
	returned []*fuzzTask // the tasks in it, in order
	err      error
}

type fuzzModel struct {
	t   *testing.T
	cfg fuzzConfig
	p   *workerpool.Pool

	trace    []string // the operations so far, for failure messages
	traced   bool     // the trace was printed
	tasks    []*fuzzTask
	taskOp   []int // index in ops of each task's submission
	ops      []*fuzzOp
	freeOps  []*fuzzOp // ops not yet returned, with a free predicate
	pauses   []*fuzzPause
	stops    []*fuzzStop
	size     int   // the pool's maximum
	resizes  []int // sizes asked for since the last settle, in no known order
	maxSize  int   // the largest maximum ever set
	together bool
	settles  int // how many times the model settled

	mu          sync.Mutex // guards the pauses' flags and stopIssued
	stopIssued  bool       // a stop call was made: pauses end
	stopSettled bool       // a stop call had returned when the current op was launched

	running       atomic.Int64 // tasks running on the pool's workers
	callerRunning atomic.Int64 // tasks running in their submitters (CallerRuns)
	limit         atomic.Int64 // the most that may run on workers at once now
	held          atomic.Int64 // pauses in force: no task may start on a worker
	sleeping      atomic.Int64 // kindSleep tasks running (on workers or callers)
	finished      atomic.Int64 // task bodies that ended
	panicked      atomic.Int64 // of them, kindPanic
	handled       atomic.Int64 // panic handler calls
	identifying   atomic.Bool  // set at the end: a task called now counts as returned
	identified    []*fuzzTask  // the tasks called since, in order
	starts        atomic.Int64 // tasks started on workers
	startedAfter  atomic.Bool  // a task started after a stop call returned
}

func runFuzzModel(t *testing.T, data []byte) {
	var head [3]byte
	n := copy(head[:], data)
	data = data[n:]
	if len(data) > maxFuzzOps {
		data = data[:maxFuzzOps]
	}
	m := &fuzzModel{t: t, cfg: decodeFuzzConfig(head)}
	m.trace = append(m.trace, m.cfg.String())
	m.size, m.maxSize = m.cfg.max, m.cfg.max
	m.limit.Store(int64(m.cfg.max))
	m.p = workerpool.New(m.cfg.max,
		workerpool.WithMinWorkers(m.cfg.min),
		workerpool.WithMaxWaiting(m.cfg.bound),
		workerpool.WithOverflow(m.cfg.overflow),
		workerpool.WithIdleTimeout(m.cfg.idle),
		workerpool.WithPanicHandler(m.panicHandler),
	)
	defer m.cleanUp()
	m.settle()
	for _, b := range data {
		m.step(b&15, int(b>>4))
		if t.Failed() {
			return
		}
		if !m.together {
			m.settle()
		}
		if b&15 != opTogether {
			m.together = false
		}
	}
	m.settle()
	m.finish()
	if testing.Verbose() {
		t.Logf("ran:\n\t%s", strings.Join(m.trace, "\n\t"))
	}
}

// failf reports a broken invariant, with the operations that led to it.
func (m *fuzzModel) failf(format string, args ...any) {
	m.t.Helper()
	m.printTrace()
	m.t.Errorf(format, args...)
}

// goFail is failf for goroutines other than the driver, which owns the
// trace: the driver prints it when it sees the failure (see cleanUp).
func (m *fuzzModel) goFail(format string, args ...any) {
	m.t.Helper()
	m.t.Errorf(format, args...)
}

// printTrace reports the operations that led to a failure, once.
func (m *fuzzModel) printTrace() {
	if !m.traced {
		m.traced = true
		m.t.Errorf("after:\n\t%s", strings.Join(m.trace, "\n\t"))
	}
}

// spawn runs fn in a goroutine that the model tracks. free, if not nil,
// says at rest whether nothing can hold the call up any more: then it must
// have returned.
func (m *fuzzModel) spawn(desc string, free func() bool, fn func()) *fuzzOp {
	op := &fuzzOp{desc: fmt.Sprintf("op %d: %s", len(m.trace)-1, desc), free: free}
	m.trace = append(m.trace, desc)
	m.ops = append(m.ops, op)
	if free != nil {
		m.freeOps = append(m.freeOps, op)
	}
	go func() {
		defer op.done.Store(true) // on return and on runtime.Goexit alike
		fn()
	}()
	return op
}

func (m *fuzzModel) step(code byte, arg int) {
	m.stopSettled = m.anyStopReturned()
	switch code {
	case opSubmit, opSubmitWait, opTrySubmit, opSubmitCtxDone, opSubmitCtx:
		method := [...]submitMethod{viaSubmit, viaSubmitWait, viaTrySubmit, viaSubmitCtxDone, viaSubmitCtx}[code]
		m.submit(method, taskKind(arg%5), time.Duration(1+arg/5)*time.Second)
	case opBurst:
		for range 1 + arg%4 {
			m.submit(viaSubmit, fuzzBurstKinds[arg/4], 0)
			if !m.together {
				m.settle()
			}
		}
	case opRelease, opReleaseAll:
		var open []*fuzzTask
		for _, tk := range m.tasks {
			if tk.gate != nil && !tk.opened {
				open = append(open, tk)
			}
		}
		if len(open) == 0 {
			m.trace = append(m.trace, "release: nothing blocked")
			return
		}
		if code == opRelease {
			open = open[arg%len(open):][:1]
		}
		for _, tk := range open {
			m.trace = append(m.trace, fmt.Sprintf("release task %d", tk.id))
			tk.opened = true
			close(tk.gate)
		}
	case opPause:
		m.pause()
	case opResume:
		m.mu.Lock()
		var pz *fuzzPause
		for _, p := range m.pauses {
			if !p.cancelled {
				pz = p
				break
			}
		}
		if pz != nil {
			pz.cancelled = true
			if pz.held {
				pz.held = false
				m.held.Add(-1)
			}
		}
		m.mu.Unlock()
		if pz == nil {
			m.trace = append(m.trace, "resume: no pause")
			return
		}
		m.trace = append(m.trace, "resume")
		pz.cancel()
	case opResize:
		lo := max(1, m.cfg.min)
		n := lo + arg%(5-lo)
		// Until the next settle, tasks may start under either maximum.
		m.limit.Store(max(m.limit.Load(), int64(n)))
		m.maxSize = max(m.maxSize, n)
		m.resizes = append(m.resizes, n)
		always := func() bool { return true }
		m.spawn(fmt.Sprintf("Resize(%d)", n), always, func() { m.p.Resize(n) })
	case opAdvance:
		m.advance(fuzzAdvance[arg%len(fuzzAdvance)])
	case opStop, opStopWait, opShutdown:
		m.stop(int(code), code == opShutdown && arg%2 == 1, fuzzDeadline[arg/2%4])
	case opTogether:
		m.trace = append(m.trace, "together:")
		m.together = true
	}
}

// submit submits one new task by method, in its own goroutine.
func (m *fuzzModel) submit(method submitMethod, kind taskKind, timeout time.Duration) {
	stopped := m.stopSettled
	bounded := m.cfg.bound > 0
	blocking := kind == kindBlock || kind == kindSleep

	tk := &fuzzTask{id: len(m.tasks), kind: kind, method: method, launched: m.settles}
	// A call must return once nothing can hold it up: no pause and no
	// other task that blocks or sleeps (then the queue drains and has
	// room), or at once if it is a kind of call that never waits.
	never := stopped || method == viaTrySubmit || method == viaSubmitCtxDone
	other := tk // only other tasks hold up a fire-and-forget submission
	switch method {
	case viaSubmitWait:
		other = nil
	case viaSubmit, viaSubmitCtx:
		never = never || !bounded || m.cfg.overflow == workerpool.Reject ||
			m.cfg.overflow == workerpool.CallerRuns && !blocking
		if bounded && m.cfg.overflow == workerpool.CallerRuns {
			other = nil // it may run in the caller
		}
	}
	free := func() bool { return never || m.tasksQuiet(other) && m.pausesQuiet(nil) }

	if kind == kindBlock {
		tk.gate = make(chan struct{})
	}
	m.tasks = append(m.tasks, tk)
	m.taskOp = append(m.taskOp, len(m.ops)) // the spawn below
	task := m.task(tk)

	desc := fmt.Sprintf("%v(task %d, %v)", method, tk.id, kind)
	m.spawn(desc, free, func() {
		normal := false
		defer func() {
			tk.goexited = !normal
			tk.resolved = true
		}()
		var err error
		switch method {
		case viaSubmit:
			err = submitCall(func() error { return m.p.Submit(task) })
		case viaSubmitWait:
			err = submitCall(func() error { return m.p.SubmitWait(task) })
		case viaTrySubmit:
			err = submitCall(func() error { return m.p.TrySubmit(task) })
		case viaSubmitCtxDone:
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err = submitCall(func() error { return m.p.SubmitCtx(ctx, task) })
		case viaSubmitCtx:
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err = submitCall(func() error { return m.p.SubmitCtx(ctx, task) })
		}
		normal = true
		tk.err = err
		m.checkSubmitResult(tk, desc, err, stopped)
	})
}

// checkSubmitResult checks that a submission returned one of the results its
// documentation allows, at once as it returns.
func (m *fuzzModel) checkSubmitResult(tk *fuzzTask, desc string, err error, stopped bool) {
	bounded := m.cfg.bound > 0
	var pe *workerpool.PanicError
	switch {
	case tk.method == viaSubmitCtxDone:
		// A stopping pool says so first; otherwise the context is done.
		switch {
		case stopped && err != workerpool.ErrStopped:
			m.goFail("%s with a cancelled context after a stop call returned %v, want ErrStopped", desc, err)
		case !errors.Is(err, context.Canceled) && err != workerpool.ErrStopped:
			m.goFail("%s with a cancelled context returned %v, want context.Canceled", desc, err)
		}
		return
	case stopped && err != workerpool.ErrStopped:
		m.goFail("%s after a stop call returned: got %v, want ErrStopped", desc, err)
	case err == nil, err == workerpool.ErrStopped:
	case err == workerpool.ErrQueueFull:
		if !bounded || tk.method != viaTrySubmit && m.cfg.overflow != workerpool.Reject {
			m.goFail("%s returned ErrQueueFull (bound %d, %v)", desc, m.cfg.bound, m.cfg.overflow)
		}
	case errors.As(err, &pe):
		if tk.method != viaSubmitWait || tk.kind != kindPanic {
			m.goFail("%s returned %v", desc, err)
		} else if v, ok := pe.Value.(fuzzPanic); !ok || v.task != tk {
			m.goFail("%s returned a PanicError with value %v, not its own", desc, pe.Value)
		}
	case errors.Is(err, context.DeadlineExceeded) && tk.method == viaSubmitCtx:
	default:
		m.goFail("%s returned %v", desc, err)
	}
	if err == nil && tk.kind == kindPanic && tk.method == viaSubmitWait {
		m.goFail("%s of a panicking task returned nil", desc)
	}
	runs := tk.runs.Load()
	if tk.method == viaSubmitWait && (err == nil || pe != nil) && (runs != 1 || !tk.finished.Load()) {
		m.goFail("%s returned %v before its task ran and ended (runs %d, ended %v)", desc, err, runs, tk.finished.Load())
	}
	if err != nil && pe == nil && runs != 0 {
		m.goFail("%s returned %v, but its task ran", desc, err)
	}
}

// submitCall calls submit. A task finds this frame on its stack when it runs
// in its submitter (CallerRuns), not on a worker.
//
//go:noinline
func submitCall(submit func() error) error { return submit() }

// onWorker reports whether the calling task runs on one of the pool's
// workers rather than in its submitter.
func onWorker() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "workerpool_test.submitCall") {
			return false
		}
		if !more {
			return true
		}
	}
}

// task returns tk's func, which records each start and end in the model.
func (m *fuzzModel) task(tk *fuzzTask) func() {
	return func() {
		if m.identifying.Load() {
			// The model calls a func that Stop returned, to learn its task.
			tk.returned++
			m.identified = append(m.identified, tk)
			return
		}
		if n := tk.runs.Add(1); n > 1 {
			m.goFail("task %d started %d times", tk.id, n)
		}
		if m.startedAfter.Load() {
			m.goFail("task %d started after a stop call returned", tk.id)
		}
		tk.started = time.Now()
		if onWorker() {
			tk.startSeq = m.starts.Add(1)
			if n, limit := m.running.Add(1), m.limit.Load(); n > limit {
				m.goFail("task %d started on a worker with %d running, more than the maximum %d", tk.id, n, limit)
			}
			if m.held.Load() > 0 {
				m.goFail("task %d started on a worker while a Pause was in force", tk.id)
			}
			defer m.running.Add(-1)
		} else {
			m.callerRunning.Add(1)
			defer m.callerRunning.Add(-1)
		}
		defer func() {
			tk.finished.Store(true)
			if tk.kind == kindPanic {
				m.panicked.Add(1)
			}
			m.finished.Add(1)
		}()
		switch tk.kind {
		case kindPanic:
			panic(fuzzPanic{tk})
		case kindGoexit:
			runtime.Goexit()
		case kindBlock:
			<-tk.gate
		case kindSleep:
			m.sleeping.Add(1)
			defer m.sleeping.Add(-1)
			time.Sleep(time.Second)
		}
	}
}

func (m *fuzzModel) panicHandler(pe *workerpool.PanicError) {
	m.handled.Add(1)
	v, ok := pe.Value.(fuzzPanic)
	switch {
	case !ok:
		m.goFail("the panic handler got %v, not a task's panic", pe.Value)
	case v.task.method == viaSubmitWait:
		m.goFail("the panic handler got the panic of SubmitWait task %d", v.task.id)
	}
}

// tasksQuiet reports whether no task but skip that blocks or sleeps may
// still run.
func (m *fuzzModel) tasksQuiet(skip *fuzzTask) bool {
	for _, tk := range m.tasks {
		if tk == skip {
			continue
		}
		if (tk.kind == kindBlock && !tk.opened || tk.kind == kindSleep) &&
			!tk.finished.Load() && !(m.resolvedOf(tk) && !tk.accepted()) {
			return false
		}
	}
	return true
}

// pausesQuiet reports whether no pause but skip is in force or may take
// hold. (Pauses launched together may take hold in either order.)
func (m *fuzzModel) pausesQuiet(skip *fuzzPause) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopIssued {
		return true
	}
	for _, pz := range m.pauses {
		if pz != skip && !pz.cancelled {
			return false
		}
	}
	return true
}

// resolvedOf reports whether tk's submission has returned, which makes its
// outcome fields safe to read (op.done is stored after them).
func (m *fuzzModel) resolvedOf(tk *fuzzTask) bool {
	return m.ops[m.taskOp[tk.id]].done.Load()
}

func (m *fuzzModel) pause() {
	ctx, cancel := context.WithCancel(context.Background())
	pz := &fuzzPause{cancel: cancel}
	m.mu.Lock()
	m.pauses = append(m.pauses, pz)
	m.mu.Unlock()
	// Pause waits for the running tasks and for the pauses before it.
	stopped := m.stopSettled
	free := func() bool { return stopped || m.tasksQuiet(nil) && m.pausesQuiet(pz) }
	m.spawn("Pause", free, func() {
		m.p.Pause(ctx)
		m.mu.Lock()
		defer m.mu.Unlock()
		if pz.cancelled || m.stopIssued {
			return // the pause ended, or never took hold
		}
		if n := m.running.Load(); n != 0 {
			m.goFail("Pause returned with %d tasks running on workers", n)
		}
		pz.held = true
		m.held.Add(1)
	})
}

// advance moves the fake clock on by d and checks idle reaping.
func (m *fuzzModel) advance(d time.Duration) {
	m.trace = append(m.trace, fmt.Sprintf("advance %v", d))
	timeout := m.cfg.idle
	if timeout == 0 {
		timeout = workerpool.DefaultIdleTimeout
	}
	// Only when nothing else happens meanwhile can the model say exactly
	// how many workers remain. (The clock moves only once every goroutine
	// is blocked, so waiting for that first changes nothing.)
	synctest.Wait()
	reapCheck := m.cfg.idle >= 0 && d > 2*timeout && m.sleeping.Load() == 0 && !m.stopIssued
	time.Sleep(d)
	m.settle()
	if !reapCheck {
		return
	}
	s := m.p.Status()
	if want := max(m.cfg.min, s.Busy); s.Workers != want {
		m.failf("%v after more than two idle timeouts (%v), %d workers remain with %d busy; want %d", d, timeout, s.Workers, s.Busy, want)
	}
}

func (m *fuzzModel) stop(kind int, deadline bool, d time.Duration) {
	m.mu.Lock()
	m.stopIssued = true
	for _, pz := range m.pauses {
		if pz.held {
			pz.held = false
			m.held.Add(-1)
		}
	}
	m.mu.Unlock()
	st := &fuzzStop{kind: kind, deadline: deadline, at: time.Now().Add(d)}
	m.stops = append(m.stops, st)
	var desc string
	var call func()
	switch kind {
	case opStop:
		desc, call = "Stop", func() { st.tasks = m.p.Stop() }
	case opStopWait:
		desc, call = "StopWait", m.p.StopWait
	case opShutdown:
		desc = "Shutdown"
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if deadline {
			desc = fmt.Sprintf("Shutdown(deadline %v)", d)
			ctx, cancel = context.WithTimeout(ctx, d)
		}
		call = func() {
			defer cancel()
			st.tasks, st.err = m.p.Shutdown(ctx)
		}
	}
	// A stop waits only for the tasks.
	st.op = m.spawn(desc, func() bool { return m.tasksQuiet(nil) }, call)
}

func (m *fuzzModel) anyStopReturned() bool {
	for _, st := range m.stops {
		if st.op.done.Load() {
			return true
		}
	}
	return false
}

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
	pending := m.freeOps[:0]
	for _, op := range m.freeOps {
		switch {
		case op.done.Load():
		case op.free():
			m.failf("%s is still blocked, though nothing can hold it up", op.desc)
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
	if s.Submitted != s.Completed+s.Abandoned+uint64(s.Waiting)+uint64(s.Busy)+inCallers {
		m.failf("at rest, Submitted != Completed + Abandoned + Waiting + Busy (+ %d running in callers): %+v", inCallers, s)
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
	if s.Waiting > 0 && s.State != workerpool.Paused && (s.Idle != 0 || s.Workers < s.MaxWorkers) {
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
		case tk.err == workerpool.ErrStopped && tk.method == viaSubmitWait:
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
}

// finish releases everything, stops the pool as the input says, and checks
// the final accounts: every accepted task ran exactly once or was handed
// back or dropped with its waiter told.
func (m *fuzzModel) finish() {
	m.trace = append(m.trace, "end: release all, resume all")
	for _, tk := range m.tasks {
		if tk.gate != nil && !tk.opened {
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
	m.stopSettled = m.anyStopReturned()
	m.stop([...]int{opStop, opStopWait, opShutdown, opShutdown}[m.cfg.final], m.cfg.final == 3, time.Second)
	// Sleeping tasks and deadlines need the clock to move; each task sleeps
	// at most a second, so a second per task is enough for all to end.
	for range len(m.tasks) + 10 {
		m.settle()
		if m.allDone() {
			break
		}
		time.Sleep(time.Second)
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
	var returned, lists int
	for _, st := range m.stops {
		if st.kind == opShutdown {
			// Shutdown's error says whether every accepted task ran: nil,
			// or its ctx's error if that is done, or ErrStopped.
			dropped := s.Abandoned > 0
			switch {
			case st.err == nil && st.tasks != nil:
				m.failf("Shutdown returned %d tasks and a nil error", len(st.tasks))
			case !dropped && st.err != nil:
				m.failf("Shutdown returned %v, but no task was dropped", st.err)
			case dropped && st.err == nil:
				m.failf("Shutdown returned nil, but %d tasks were dropped", s.Abandoned)
			case dropped && st.err != workerpool.ErrStopped && !(st.deadline && errors.Is(st.err, context.DeadlineExceeded)):
				m.failf("Shutdown returned %v", st.err)
			}
		}
		if len(st.tasks) > 0 {
			lists++
		}
		m.identified = nil
		for _, fn := range st.tasks {
			fn()
			returned++
		}
		st.returned = m.identified
	}
	if lists > 1 {
		m.failf("%d stop calls returned tasks; only the first may", lists)
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
			if tk.err == workerpool.ErrStopped && tk.method == viaSubmitWait {
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

// cleanUp ends a failed run as quietly as it can, so that the failure is
// reported rather than a deadlock of the bubble: it releases every task and
// pause, stops the pool and lets the clock run until every call returned.
func (m *fuzzModel) cleanUp() {
	if !m.t.Failed() {
		return
	}
	m.printTrace()
	m.identifying.Store(true) // no more checks in tasks
	for _, tk := range m.tasks {
		if tk.gate != nil && !tk.opened {
			tk.opened = true
			close(tk.gate)
		}
	}
	m.mu.Lock()
	m.stopIssued = true
	for _, pz := range m.pauses {
		pz.cancelled = true
		pz.cancel()
	}
	m.mu.Unlock()
	stopped := make(chan struct{})
	go func() { m.p.Stop(); close(stopped) }()
	for range len(m.tasks) + 10 {
		synctest.Wait()
		select {
		case <-stopped:
			if m.allDone() {
				return
			}
		default:
		}
		time.Sleep(time.Second)
	}
}

func (m *fuzzModel) allDone() bool {
	for _, op := range m.ops {
		if !op.done.Load() {
			return false
		}
	}
	return true
}

// bubbleGoroutines returns the stacks of the goroutines in the calling
// goroutine's synctest bubble, other than the caller and synctest's own.
func bubbleGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	self, _, _ := strings.Cut(stacks[0], "\n") // "goroutine N [running, synctest bubble B]:"
	_, bubble, ok := strings.Cut(self, "synctest bubble ")
	if !ok {
		return nil
	}
	var left []string
	for _, g := range stacks[1:] {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "synctest bubble "+bubble) &&
			!strings.Contains(g, "internal/synctest.Run(") &&
			!strings.Contains(g, "testing/synctest.testingSynctestTest(") {
			left = append(left, g)
		}
	}
	return left
}

// fuzzSeeds are the hand-written inputs: the scenarios the other tests
// specify one at a time, as starting points for the fuzzer. go test runs
// them, and those in testdata/fuzz/FuzzPool.
var fuzzSeeds = [][]byte{
	// Every kind of task through every kind of submission, then StopWait.
	fuzzSeed(2, 0, 0, workerpool.Block, 2, 1,
		fop(opSubmit, int(kindQuick)), fop(opSubmit, int(kindPanic)), fop(opSubmit, int(kindGoexit)),
		fop(opSubmitWait, int(kindPanic)), fop(opSubmitWait, int(kindGoexit)), fop(opTrySubmit, int(kindQuick)),
		fop(opSubmitCtxDone, int(kindQuick)), fop(opSubmitCtx, int(kindSleep)), fop(opSubmitWait, int(kindQuick))),
	// Stop drops the queue behind a blocked worker, waiters included.
	fuzzSeed(1, 0, 0, workerpool.Block, 0, 0,
		fop(opSubmit, int(kindBlock)), fop(opBurst, 2), fop(opSubmitWait, int(kindQuick)), fop(opSubmit, int(kindPanic)),
		fop(opStop, 0), fop(opSubmit, int(kindQuick)), fop(opReleaseAll, 0)),
	// Block overflow: submitters wait for room, then get in as it frees.
	fuzzSeed(1, 0, 1, workerpool.Block, 1, 1,
		fop(opSubmit, int(kindBlock)), fop(opSubmit, int(kindQuick)), fop(opSubmit, int(kindQuick)),
		fop(opSubmitWait, int(kindQuick)), fop(opSubmitCtx, 5+int(kindQuick)), fop(opTrySubmit, int(kindQuick)),
		fop(opAdvance, 3), fop(opRelease, 0), fop(opAdvance, 4)),
	// Reject overflow: a full queue refuses every kind of submission.
	fuzzSeed(1, 0, 2, workerpool.Reject, 0, 2,
		fop(opSubmit, int(kindBlock)), fop(opBurst, 3), fop(opSubmitWait, int(kindQuick)),
		fop(opSubmitCtx, int(kindQuick)), fop(opTrySubmit, int(kindQuick)), fop(opRelease, 0)),
	// CallerRuns: overflowing tasks, panics and Goexits run in the caller.
	fuzzSeed(1, 1, 1, workerpool.CallerRuns, 2, 1,
		fop(opSubmit, int(kindBlock)), fop(opSubmit, int(kindQuick)), fop(opSubmit, int(kindPanic)),
		fop(opSubmit, int(kindGoexit)), fop(opSubmitWait, int(kindPanic)), fop(opSubmitWait, int(kindGoexit)),
		fop(opSubmit, int(kindBlock)), fop(opReleaseAll, 0)),
	// Pauses hold new tasks; a second Pause queues behind the first.
	fuzzSeed(2, 0, 0, workerpool.Block, 0, 1,
		fop(opPause, 0), fop(opBurst, 2), fop(opSubmitWait, int(kindQuick)), fop(opAdvance, 2),
		fop(opPause, 0), fop(opResume, 0), fop(opSubmit, int(kindQuick)), fop(opResume, 0)),
	// Pause waits for a running task; Resize while paused starts nothing.
	fuzzSeed(3, 0, 2, workerpool.Block, 1, 1,
		fop(opSubmit, int(kindBlock)), fop(opSubmit, int(kindSleep)), fop(opPause, 0), fop(opBurst, 3),
		fop(opResize, 0), fop(opRelease, 0), fop(opAdvance, 2), fop(opResize, 3), fop(opResume, 0)),
	// Resize down below the busy workers, then up again.
	fuzzSeed(4, 0, 0, workerpool.Block, 0, 1,
		fop(opBurst, 4+3), fop(opResize, 0), fop(opBurst, 2), fop(opRelease, 0), fop(opRelease, 1),
		fop(opReleaseAll, 0), fop(opResize, 3), fop(opBurst, 3)),
	// Idle workers are reaped down to the minimum, and come back.
	fuzzSeed(4, 1, 0, workerpool.Block, 1, 0,
		fop(opTogether, 0), fop(opBurst, 3), fop(opBurst, 4+3), fop(opReleaseAll, 0), fop(opAdvance, 4),
		fop(opBurst, 3), fop(opAdvance, 4)),
	// A Shutdown deadline drops the queue while sleeping tasks run.
	fuzzSeed(1, 0, 0, workerpool.Block, 0, 0,
		fop(opBurst, 8+3), fop(opSubmitWait, int(kindSleep)), fop(opShutdown, 3), fop(opAdvance, 1),
		fop(opAdvance, 3)),
	// Stops race submissions.
	fuzzSeed(2, 0, 1, workerpool.Block, 2, 1,
		fop(opSubmit, int(kindBlock)), fop(opBurst, 2), fop(opTogether, 0), fop(opSubmitWait, int(kindQuick)),
		fop(opStopWait, 0), fop(opTogether, 0), fop(opSubmit, int(kindQuick)), fop(opStop, 0),
		fop(opReleaseAll, 0)),
	// Stop escalates a StopWait; Shutdown after both gets nothing.
	fuzzSeed(1, 0, 0, workerpool.Block, 0, 2,
		fop(opSubmit, int(kindBlock)), fop(opBurst, 2), fop(opStopWait, 0), fop(opStop, 0),
		fop(opShutdown, 1), fop(opRelease, 0)),
	// Stop ends a pause with tasks held; Pause after it returns at once.
	fuzzSeed(2, 2, 3, workerpool.Reject, 0, 0,
		fop(opPause, 0), fop(opBurst, 3), fop(opSubmitWait, int(kindQuick)), fop(opStop, 0), fop(opPause, 0),
		fop(opResize, 1)),
}

// fuzzSeed encodes a configuration (idle indexes fuzzIdle, final is as in
// fuzzConfig) and operations as FuzzPool input.
func fuzzSeed(max, min, bound int, overflow workerpool.Overflow, idle, final int, ops ...byte) []byte {
	head := []byte{byte(max-1) | byte(overflow)<<2, byte(min) | byte(bound)<<3 | byte(idle)<<5, byte(final)}
	return append(head, ops...)
}

// fop encodes one operation.
func fop(code, arg int) byte { return byte(code) | byte(arg)<<4 }

// checkOrder checks that tasks are handed to workers, and come back from
// Stop, in the order the pool accepted them, and that none starts after a
// Shutdown deadline. The model knows the order of two tasks only when one's
// submission had returned before the other's was launched. It sees the
// order of hand-offs only as the order of starts, which is the same only
// when there is one worker.
func (m *fuzzModel) checkOrder() {
	before := func(a, b *fuzzTask) bool { // the pool accepted a before b
		return a.seen != 0 && a.seen <= b.launched && a.accepted()
	}
	for _, b := range m.tasks {
		if b.startSeq == 0 {
			continue // never started on a worker
		}
		for _, a := range m.tasks {
			switch {
			case !before(a, b):
			case a.runs.Load() == 0:
				m.failf("task %d started on a worker, but task %d, accepted before it, never started", b.id, a.id)
			case m.maxSize == 1 && a.startSeq > b.startSeq:
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
