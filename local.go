package workerpool

import (
	"context"
	"sync/atomic"
)

// A Local is state that each worker keeps for itself: a connection, a
// parser, a scratch buffer. A worker makes its own with open the first time
// it runs a task that asks for it ([Local.Submit] or [CallWith]), hands it
// to each such task it runs, one task at a time, and closes it with close
// when it exits, whatever the reason: reaped when idle, made surplus by
// [Pool.Resize], or ended by Stop, StopWait or Shutdown. So the states
// follow the workers: a pool that shrinks to two workers overnight holds two.
// The workers that [WithMinWorkers] keeps keep theirs; a task that panics
// or calls [runtime.Goexit] leaves its worker's state to the next task.
//
// This is tunny's Worker, per worker and not per pool: see the README's
// migration notes. A Local may serve any number of pools and sub-pools;
// each of their workers has its own state. Its methods are safe for
// concurrent use. A pool that has no task asking for a Local pays nothing
// for it.
type Local[S any] struct {
	id    uint64
	open  func() (S, error)
	close func(S)
}

// localIDs numbers the Locals, so that a worker can tell its states apart.
var localIDs atomic.Uint64

// NewLocal returns a Local whose state each worker makes with open and
// closes with close, which may be nil. Both run on the worker's goroutine:
// open before the first task that needs the state, close as the worker
// exits. A panic in open is the task's panic; a panic in close goes to the
// panic handler. NewLocal panics if open is nil.
func NewLocal[S any](open func() (S, error), close func(S)) *Local[S] {
	if open == nil {
		panic("workerpool: NewLocal: nil open func")
	}
	return &Local[S]{id: localIDs.Add(1), open: open, close: close}
}

// get returns the state that the worker with states l holds, made if it has
// none. (A task that asks for a state never runs in its submitter, so it
// always has a worker.)
func (x *Local[S]) get(l *locals) (S, error) {
	for _, v := range l.values {
		if v.id == x.id {
			return v.value.(S), nil
		}
	}
	s, err := x.open()
	if err != nil {
		return s, err
	}
	close := func(any) {}
	if x.close != nil {
		close = func(v any) { x.close(v.(S)) }
	}
	l.values = append(l.values, localValue{id: x.id, value: s, close: close})
	return s, nil
}

// Submit is [Pool.Submit] for a task that needs the worker's state: task
// runs on one of s's workers, with that worker's state. If the worker has
// none and open fails, task does not run, and the panic handler (see
// [WithPanicHandler]) gets a [*PanicError] whose Value is open's error;
// the task counts as completed, not as panicked. A panic in task goes to
// the panic handler, as a Submit's does. If Stop (or a Shutdown deadline,
// or [Subpool.Stop]) drops the task before it starts, it returns it as a
// func that opens a state of its own, runs task with it and closes it. The
// task never runs in its submitter: under [CallerRuns], Submit waits for
// room in a full queue, as under [Block]; under [Reject] it returns
// [ErrQueueFull]. Submit allocates one object.
//
// Submit panics if x or s is nil.
func (x *Local[S]) Submit(s Submitter, task func(S)) error {
	if x == nil {
		panic("workerpool: Local.Submit: nil Local")
	}
	st, _ := mustTarget("Local.Submit", s)
	if task == nil {
		return ErrNilTask
	}
	overflow := st.cfg.overflow
	if overflow == CallerRuns {
		overflow = Block // its task needs a worker's state
	}
	return submitWaiter(s, nil, &localTask[S]{s: st, x: x, fn: task}, overflow)
}

// A localTask is the waiter of one task given to Local.Submit.
type localTask[S any] struct {
	s  *state
	x  *Local[S]
	fn func(S)
}

func (t *localTask[S]) take() bool { return true } // its submitter never gives up

// do runs the task with the worker's state. If the state cannot be
// opened, it returns why: the task is then completed without running, and
// the error goes to the panic handler, after the task is counted, as a
// panic's would.
func (t *localTask[S]) do(l *locals) error {
	s, err := t.x.get(l)
	if err != nil {
		return err
	}
	t.fn(s)
	return nil
}

// finish has nothing to tell: a panic went to the panic handler, and a
// stop returns the task instead (asFunc).
func (t *localTask[S]) finish(error) {}

// asFunc returns the task as a func that runs it with a state of its own,
// opened before and closed after: what Stop returns if it drops the task.
func (t *localTask[S]) asFunc() func() {
	return func() {
		s, err := t.x.open()
		if err != nil {
			t.s.cfg.panicHandler(&PanicError{Value: err})
			return
		}
		if t.x.close != nil {
			defer t.x.close(s)
		}
		t.fn(s)
	}
}

// CallWith is [Call] for a function that needs the worker's state: fn runs
// on one of s's workers with that worker's state, and everything Call
// promises holds. If the worker has none and open fails, fn does not run
// and CallWith returns open's error.
//
// CallWith panics if ctx, s or x is nil.
func CallWith[S, T any](ctx context.Context, s Submitter, x *Local[S], fn func(context.Context, S) (T, error)) (T, error) {
	mustContext("CallWith", ctx)
	mustTarget("CallWith", s)
	if x == nil {
		panic("workerpool: CallWith: nil Local")
	}
	if fn == nil {
		var zero T
		return zero, ErrNilTask
	}
	c := &callTask[T]{ctx: ctx}
	c.with = func(l *locals) (T, error) {
		st, err := x.get(l)
		if err != nil {
			var zero T
			return zero, err
		}
		return fn(ctx, st)
	}
	return call(ctx, s, c)
}
