package workerpool

import (
	"fmt"
	"sync/atomic"

	"github.com/dispatchkit/workerpool/internal/sched"
)

// The scheduler's types, for the pool's waiter: a task is a fire-and-forget
// func or a waiter; an entry is a task as the scheduler knows it, with its
// queue, its key and its seq.
type (
	task      = sched.Task[waiter]
	entry     = sched.Entry[waiter]
	queue     = sched.Queue[waiter]
	scheduler = sched.Scheduler[waiter]
)

// A waiter is a task whose submitter learns what became of it: the task of
// a SubmitWait, a Future, a Call, a Group or a Map, or a Local's.
//
// Before it runs or drops the task, the pool takes it: take reports false
// if its submitter gave up on it first, and then the pool neither runs it
// nor tells its submitter anything. Once taken, the pool calls do, with
// the worker's states of Locals, and then finish exactly once: after do
// returned, panicked or called runtime.Goexit (with nil or the
// *PanicError); or, instead, finish with ErrStopped when a stop dropped the
// task. do returns nil, or why the task could not run at all: its worker's
// state could not be opened. finish may run on a worker, the loop or the
// submitter, so it must not block or call into the pool.
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

// locals holds a worker's states, one for each Local its tasks asked for.
// Only the worker's goroutine touches it.
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

// A cancelable is a waiter whose submitter may give up on it before it
// starts.
type cancelable interface {
	waiter
	giveUp() bool
	spot() *queueSpot
}

// A queueSpot is where a cancelable task waits: its queue and its seq,
// which the loop records when it accepts the task and reads when the
// submitter gives up on it; and whether the task is counted Canceled,
// which whoever counts it sets first.
type queueSpot struct {
	queue   *queue
	level   int32
	seq     uint64
	counted atomic.Bool
}

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

// asError returns pe as an error: nil if pe is nil.
func (pe *PanicError) asError() error {
	if pe == nil {
		return nil
	}
	return pe
}
