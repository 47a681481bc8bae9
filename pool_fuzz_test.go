package workerpool_test

import (
	"context"
	"errors"
	"fmt"
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
// Inputs with the v2 bit (see decodeFuzzConfig) run on a pool with two
// sub-pools, and submit to all three and with keys (see fuzzModel.stepV2).
// They check as well that no sub-pool runs more tasks than its limit, that
// tasks with the same key never overlap and start in order, that each
// sub-pool's Status agrees with the model, and, with one worker and an
// unbounded queue, that tasks start exactly in the order a model of fair
// turns and keyed order predicts (see turnModel).
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
	opSubmitCtxDone        // SubmitContext with a cancelled context
	opSubmitCtx            // SubmitContext with a context that expires after 1+arg/5 s
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

// fuzzKeys are the keys of v2 inputs' keyed tasks.
var fuzzKeys = [...]string{"k0", "k1"}

// targetName names a v2 input's targets: the pool and its two sub-pools.
func targetName(target int) string { return [...]string{"pool", "A", "B"}[target] }

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
	v2              bool          // with sub-pools A and B and keys
	limits          [2]int        // v2: the limits of A and B
}

// decodeFuzzConfig reads the configuration: byte 0 holds max-1 (2 bits) and
// the overflow policy; byte 1 min (3 bits, taken mod max+1), the queue bound
// (2 bits, 0 unbounded) and the idle timeout (2 bits, fuzzIdle); byte 2 the
// final stop (2 bits) and the v2 bit (bit 2), then for v2 the limits of A
// (bit 3) and B (bits 4-5). A v2 input has one worker and an unbounded
// queue half the time each, where the turn model predicts every start: its
// maximum is 1, 1, 2 or 3 and its bound 0, 0, 2 or 3.
func decodeFuzzConfig(b [3]byte) fuzzConfig {
	c := fuzzConfig{
		max:      1 + int(b[0]&3),
		overflow: workerpool.Overflow(int(b[0]>>2) % 3),
		bound:    int(b[1]>>3) & 3,
		idle:     fuzzIdle[b[1]>>5&3],
		final:    int(b[2] & 3),
		v2:       b[2]&4 != 0,
	}
	if c.v2 {
		c.max = [...]int{1, 1, 2, 3}[b[0]&3]
		c.bound = [...]int{0, 0, 2, 3}[b[1]>>3&3]
		c.limits = [2]int{1 + int(b[2]>>3&1), 1 + int(b[2]>>4&3)%3}
	}
	c.min = int(b[1]&7) % (c.max + 1)
	return c
}

func (c fuzzConfig) String() string {
	s := fmt.Sprintf("New(%d, min %d, bound %d, %v, idle %v), final stop %d", c.max, c.min, c.bound, c.overflow, c.idle, c.final)
	if c.v2 {
		s += fmt.Sprintf(", sub-pools A (limit %d) and B (limit %d)", c.limits[0], c.limits[1])
	}
	return s
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
	viaSubmitKey
)

func (m submitMethod) String() string {
	return [...]string{"Submit", "SubmitWait", "TrySubmit", "SubmitContext(cancelled)", "SubmitContext", "SubmitKey"}[m]
}

// A fuzzTask is the model's record of one submitted task.
type fuzzTask struct {
	id     int
	kind   taskKind
	method submitMethod
	gate   chan struct{} // kindBlock, and all but kindSleep in v2: closed to release it
	opened bool          // gate closed; owned by the driver
	target int           // v2: 0 the pool, 1 and 2 sub-pools A and B
	keyed  bool          // v2: submitted with SubmitKey, with key
	key    string

	runs     atomic.Int32 // times the task started
	started  time.Time    // when, on the fake clock; written before finished
	startSeq atomic.Int64 // its place among the starts on workers, from 1; 0 if none

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
	target   int // v2: 0 the pool, 1 or 2 a sub-pool's Stop or StopWait
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

	// v2 only.
	subs        [2]*workerpool.Subpool
	tm          *turnModel
	targets     [3]fuzzTarget
	keyRunning  [3][len(fuzzKeys)]atomic.Int32 // tasks running per target and key
	subLimits   [2]int                         // the sub-pools' limits
	subResizes  [2][]int                       // limits asked for since the last settle
	closedAt    [3]int                         // 1 + settles when a sub-pool's Stop or StopWait was called; 0 if never
	subDropping bool                           // a sub-pool's Stop was called
	subPeaks    [2]int                         // the most tasks seen waiting in each sub-pool at rest
}

// A fuzzTarget counts the tasks of one target of a v2 input, as the tasks
// see them.
type fuzzTarget struct {
	running       atomic.Int64 // on workers
	callerRunning atomic.Int64
	limit         atomic.Int64 // the most that may run on workers now; 0 no limit
	finished      atomic.Int64
	panicked      atomic.Int64
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
	if m.cfg.v2 {
		m.startV2()
	}
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
