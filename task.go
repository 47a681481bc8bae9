package workerpool

import (
	"sync"
	"sync/atomic"
)

// A task is one submitted piece of work: a fire-and-forget func, or a
// waiter, whose submitter learns what became of it. Exactly one is set.
type task struct {
	fn func()
	w  waiter
}

// A waiter is a task whose submitter learns what became of it: the task of
// a SubmitWait, a Future, a Call, a Group or a Map.
//
// Before it runs or drops the task, the pool takes it: take reports false
// if its submitter gave up on it first, and then the pool neither runs it
// nor tells its submitter anything. Once taken, the pool calls do, with
// the worker's states of Locals, and then finish exactly once: after do
// returned, panicked or called runtime.Goexit (with nil or the
// *PanicError); or, instead, finish with ErrStopped when a stop dropped the
// task. do returns nil, or why the task could not run at all: its worker's
// state could not be opened. finish may run on a worker, the dispatcher or
// the submitter, so it must not block or call into the pool.
type waiter interface {
	take() bool
	do(l *locals) (notRun error)
	finish(err error)
}

// A fireAndForget is a waiter with no caller waiting for it: a task given
// to Local.Submit. Its panic goes to the panic handler, as a Submit's does,
// and a stop that drops it returns it, as a func (asFunc), as it does a
// Submit's task.
type fireAndForget interface {
	waiter
	asFunc() func()
}

// isFireAndForget reports whether w has no caller waiting for it.
func isFireAndForget(w waiter) bool {
	_, ok := w.(fireAndForget)
	return ok
}

// A takeState decides, once, who owns the outcome of a task whose
// submitter may give up on it: the pool, which runs or drops it, or the
// submitter.
type takeState struct{ state atomic.Uint32 }

const (
	undecided = iota
	takenByPool
	givenUp
)

// take is waiter.take: the pool takes the task, unless its submitter gave
// up on it first.
func (c *takeState) take() bool {
	return c.state.Load() == takenByPool || c.state.CompareAndSwap(undecided, takenByPool)
}

// giveUp takes the task back for its submitter, unless the pool took it
// first, and reports whether it did.
func (c *takeState) giveUp() bool { return c.state.CompareAndSwap(undecided, givenUp) }

// locals holds a worker's states, one for each Local its tasks asked for. Only
// the worker's goroutine touches it.
type locals struct {
	values []localValue
}

// A localValue is one worker's state for the Local numbered id, with the
// func that closes it.
type localValue struct {
	id    uint64
	value any
	close func(any)
}

// A report tells the dispatcher that a task whose end the scheduler must
// know ended (ended): a sub-pool's task (its limit, its stop) or a keyed
// one (its key); or that a worker skipped a task its submitter gave up on
// (skipped), which the dispatcher counts Canceled. It holds the task's lane
// and key line, not the task.
type report struct {
	lane    *lane
	line    *keyLine
	ended   bool
	skipped waiter
}

// reports carries the reports from the workers to the dispatcher. A worker
// adds its report and, if the dispatcher listens, wakes it; the dispatcher
// takes them all at once.
type reports struct {
	mu   sync.Mutex
	list []report
	n    atomic.Int64 // len(list), for the dispatcher to look without the lock
}

func (r *reports) add(x report) {
	r.mu.Lock()
	r.list = append(r.list, x)
	r.n.Store(int64(len(r.list)))
	r.mu.Unlock()
}

// take swaps the list for buf, emptied, and returns the list.
func (r *reports) take(buf []report) []report {
	r.mu.Lock()
	got := r.list
	r.list = buf[:0]
	r.n.Store(0)
	r.mu.Unlock()
	return got
}

// maxReuse is the most reports whose list the dispatcher keeps for reuse.
const maxReuse = 256
