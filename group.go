package workerpool

import (
	"context"
	"sync"
	"sync/atomic"
)

// A Group runs related tasks on a pool and collects their first error, as
// golang.org/x/sync/errgroup does, without starting a goroutine per task:
// the tasks run on the pool's workers, alongside its other tasks and other
// groups. Create one with [Pool.Group]; its methods are safe for concurrent
// use. A Group is for one round of work: once [Group.Wait] has returned, its
// context is cancelled and tasks given to it later are skipped.
//
// The group's context, passed to every task, is cancelled when a task fails
// (returns an error or panics), when the context given to [Pool.Group] is
// done, or when Wait returns. Tasks that have not started by then are
// skipped: they never run, and [Group.Skipped] counts them. Tasks already
// running are not interrupted; they see the cancelled context and finish.
// A failure in one group does not touch any other group's tasks.
type Group struct {
	p      *Pool
	ctx    context.Context
	cancel context.CancelCauseFunc

	// wg counts tasks the group took and has not yet accounted for: Add
	// before a task is submitted, Done once finish has recorded it (or once
	// the submission failed and was recorded).
	wg sync.WaitGroup

	skipped atomic.Int64 // tasks taken whose fn never ran

	mu  sync.Mutex
	err error // the first failure; guarded by mu
}

// Group returns a new, empty group of tasks that run on p. Its context is
// derived from ctx (see [Group.Context]); tasks that have not started when
// ctx is done are skipped. A group costs a few allocations of its own,
// whatever its number of tasks: the Group and its cancellable context.
// Group panics if ctx is nil.
func (p *Pool) Group(ctx context.Context) *Group {
	if ctx == nil {
		panic("workerpool: Group with a nil context")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	return &Group{p: p, ctx: ctx, cancel: cancel}
}

// Context returns the group's context, the one passed to its tasks. It is
// cancelled when a task fails, when the parent context is done, or when
// [Group.Wait] returns; [context.Cause] then gives the group's error, the
// parent's cause, or [context.Canceled] if Wait found no error.
func (g *Group) Context() context.Context { return g.ctx }

// Go submits fn to the group's pool, to be called with the group's context.
// Go blocks only as [Pool.Submit] would, while a bounded queue is full under
// the [Block] policy, and gives up if the group's context is done
// meanwhile; under [CallerRuns] it may run fn itself before returning.
//
// Nothing given to Go is lost: fn runs, or is counted in [Group.Skipped]. If
// the group's context is already done, fn is skipped and nothing is
// submitted. If the pool refuses fn, with [ErrStopped], with [ErrQueueFull]
// under [Reject], or with [ErrNilTask] for a nil fn, the refusal becomes the
// group's error, as a failed task's would, and fn is counted as skipped. Use
// [Group.TryGo] to handle a full queue without failing the group.
//
// Calls to Go must happen before [Group.Wait] is called, or come from a task
// of the group. Go allocates one object of 16 bytes per task beyond fn's
// own closure, and a task costs about 0.5 µs, run and waited for
// (BenchmarkGroupGo, 4 workers, 2 cores); a skipped fn costs nothing.
func (g *Group) Go(fn func(ctx context.Context) error) {
	g.submit(fn, false)
}

// TryGo is [Group.Go] that never waits for room and never fails the group
// over a refusal: it returns false, and neither runs nor counts fn, if the
// pool would not accept fn at once, because its bounded queue is full (see
// [Pool.TrySubmit]), it is stopped, or fn is nil. Otherwise it returns true,
// and fn runs or is skipped as Go's would be.
func (g *Group) TryGo(fn func(ctx context.Context) error) bool {
	return g.submit(fn, true)
}

// Wait waits until every task given to the group has run or been skipped,
// cancels the group's context, and returns the group's error: the first of
// the tasks' errors, a [*PanicError] if that task panicked, the pool's
// refusal of a task (see [Group.Go]), [ErrStopped] if [Pool.Stop] dropped a
// task before it started, or the parent context's cause if tasks were
// skipped because it was done. Wait returns nil if every task ran and
// returned nil (or called [runtime.Goexit]).
//
// Wait never waits for a task that will not run: a stopped pool reports the
// tasks it dropped at once. Everything the tasks did happens before Wait
// returns. Calling Wait from inside a task of the same pool can deadlock, as
// [Pool.SubmitWait] can.
func (g *Group) Wait() error {
	g.wg.Wait()
	err := g.firstErr()
	g.cancel(err)
	return err
}

// Skipped returns the number of tasks given to the group whose fn never ran:
// skipped because the group's context was done before they started, dropped
// by [Pool.Stop], or refused by the pool (see [Group.Go]). Tasks that TryGo
// turned away are not counted. The count is final once [Group.Wait] has
// returned.
//
// A task skipped after a worker took it still counts in [Pool.Status] as
// Completed, as the pool ran the wrapper that skipped it; one skipped in Go
// never reached the pool.
func (g *Group) Skipped() int { return int(g.skipped.Load()) }

// submit is Go, or TryGo if try is set; it reports whether the group took
// fn.
func (g *Group) submit(fn func(context.Context) error, try bool) bool {
	switch {
	case fn == nil && try:
		return false
	case fn == nil:
		g.skipped.Add(1)
		g.fail(ErrNilTask)
		return true
	case g.ctx.Err() != nil:
		// Cancelled already: skip fn without bothering the pool.
		g.skip()
		return true
	}
	overflow := g.p.cfg.overflow
	if try {
		overflow = Reject
	}
	return g.start(&groupTask{g: g, fn: fn}, overflow, try)
}

// start submits w, a task of the group whose do and finish account for it
// with g.skip, g.fail and g.ended. Giving up because the group's context is
// done while waiting for room skips the task. A refusal by the pool is
// recorded as a skipped task and the group's error, unless try is set: then
// start returns false and records nothing.
func (g *Group) start(w waiter, overflow Overflow, try bool) bool {
	g.wg.Add(1)
	err := g.p.submitWaiter(g.ctx, w, overflow)
	if err == nil {
		return true // the pool calls w.finish, which calls g.ended
	}
	// Record before Done, so that Wait sees it.
	defer g.wg.Done()
	switch {
	case err == g.ctx.Err():
		g.skip()
	case try:
		return false
	default: // ErrStopped, or ErrQueueFull under Reject
		g.skipped.Add(1)
		g.fail(err)
	}
	return true
}

// skip counts a task that will not run because the group's context is done.
// If no task failed, the context's cause (the parent's, or Canceled after
// Wait) becomes the group's error: the task did not succeed.
func (g *Group) skip() {
	g.skipped.Add(1)
	g.fail(context.Cause(g.ctx))
}

// fail records err as the group's error if it is the first, and cancels the
// group's context with it as the cause.
func (g *Group) fail(err error) {
	g.mu.Lock()
	first := g.err == nil
	if first {
		g.err = err
	}
	g.mu.Unlock()
	if first {
		g.cancel(err)
	}
}

// firstErr returns the group's error.
func (g *Group) firstErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// ended accounts for a submitted task from its finish: err is nil after it
// ran, its *PanicError, or ErrStopped if Stop dropped it before it started.
func (g *Group) ended(err error) {
	if err != nil {
		if err == ErrStopped {
			g.skipped.Add(1)
		}
		g.fail(err)
	}
	g.wg.Done()
}

// A groupTask is the waiter of one task given to [Group.Go]: 16 bytes.
type groupTask struct {
	g  *Group
	fn func(context.Context) error
}

// do runs fn with the group's context, unless that is done: then fn is
// skipped. A task that has started is never skipped.
func (t *groupTask) do() {
	g := t.g
	if g.ctx.Err() != nil {
		g.skip()
		return
	}
	if err := t.fn(g.ctx); err != nil {
		g.fail(err)
	}
}

func (t *groupTask) finish(err error) { t.g.ended(err) }
