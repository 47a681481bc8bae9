package workerpool

import "sync/atomic"

// A task is one submitted piece of work: a fire-and-forget func, or a
// waiter, whose submitter learns what became of it. Exactly one is set.
type task struct {
	fn func()
	w  waiter
}

// A waiter is a task whose submitter learns what became of it: the task of
// a SubmitWait, a Future, a Call, a Group or a Map.
//
// Before it runs or drops the task, the pool claims it: claim reports
// false if its submitter gave up on it first, and then
// the pool neither runs it nor tells its submitter anything. Once claimed,
// the pool calls do, with the worker's states of Locals, and then finish
// exactly once: after do returned, panicked or called runtime.Goexit (with
// nil or the *PanicError); or, instead, finish with ErrStopped when a stop
// dropped the task. finish may run on a worker, the dispatcher or the
// submitter, so it must not block or call into the pool.
type waiter interface {
	claim() bool
	do(l *locals)
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

// A claimState decides, once, who owns the outcome of a task whose
// submitter may give up on it: the pool, which runs or drops it, or the
// submitter.
type claimState struct{ state atomic.Uint32 }

const (
	pending = iota
	claimedByPool
	givenUp
)

// claim is waiter.claim: the pool takes the task, unless its submitter gave
// up on it first.
func (c *claimState) claim() bool {
	return c.state.Load() == claimedByPool || c.state.CompareAndSwap(pending, claimedByPool)
}

// giveUp takes the task back for its submitter, unless the pool claimed it
// first, and reports whether it did.
func (c *claimState) giveUp() bool { return c.state.CompareAndSwap(pending, givenUp) }

// gaveUp reports whether the task's submitter took it back.
func (c *claimState) gaveUp() bool { return c.state.Load() == givenUp }

// locals holds a worker's states, one for each Local its tasks asked for
// asked for. Only the worker's goroutine touches it.
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
