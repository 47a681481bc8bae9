package workerpool

import (
	"context"
	"sync"
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
	to     Submitter // where its tasks go: a pool or a sub-pool
	s      *state
	ctx    context.Context
	cancel context.CancelCauseFunc

	// The group's accounts, guarded by mu. A task given to the group is
	// queued in the pool, then running, then ended; or it is skipped.
	// Wait waits while any task is queued or running. Once the group's
	// context is done, closed is set and the queued tasks are all counted
	// as skipped at once, rather than one by one as workers reach them,
	// which may take long on a paused or busy pool.
	mu         sync.Mutex
	err        error // the first failure
	skipped    int   // tasks taken whose fn never ran
	queued     int   // in the pool, not started; 0 once closed
	running    int   // started and not ended
	closed     bool
	givingUp   bool // close is giving up on the tasks that were queued
	waitCalled bool
	idle       chan struct{} // closed once Wait was called and no task is queued or running

	// The tasks the group submitted, to give up on once its context is
	// done: Go's in mine; Map's in items, the first
	// entered of them. Guarded by mu.
	mine    []*groupTask
	items   itemList
	entered int
}

// An itemList is Map's slice of tasks, for its group to give up on.
type itemList interface {
	item(i int) cancelable
}

// Group returns a new, empty group of tasks that run on p. Its context is
// derived from ctx (see [Group.Context]); tasks that have not started when
// ctx is done are skipped. A group costs a few allocations of its own,
// whatever its number of tasks: the Group, its cancellable context and the
// channel that releases Wait.
// Group panics if ctx is nil.
func (p *Pool) Group(ctx context.Context) *Group {
	mustContext("Group", ctx)
	return newGroup(p, ctx).watch()
}

// newGroup returns a group of tasks for to, with a context derived from
// ctx, which its callers have checked is not nil.
func newGroup(to Submitter, ctx context.Context) *Group {
	s, _ := to.target()
	ctx, cancel := context.WithCancelCause(ctx)
	return &Group{to: to, s: s, ctx: ctx, cancel: cancel, idle: make(chan struct{})}
}

// watch makes the group skip its queued tasks as soon as its context is
// done, whether or not Wait has been called.
func (g *Group) watch() *Group {
	context.AfterFunc(g.ctx, g.close)
	return g
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
// of the group. Go allocates one object of 40 bytes per task beyond fn's
// own closure; a skipped fn costs nothing.
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
// returns, and so does the accounting of those that did not run: the
// pool's [Pool.Status] (and its sub-pool's) counts them Canceled or
// Abandoned by then. Calling Wait from inside a task of the same pool can
// deadlock, as [Pool.SubmitWait] can.
func (g *Group) Wait() error {
	g.mu.Lock()
	g.waitCalled = true
	g.settleLocked()
	g.mu.Unlock()
	select {
	case <-g.idle:
	case <-g.ctx.Done():
		// Skip the queued tasks now, and wait for the running ones.
		g.close()
		<-g.idle
	}
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
// Once the group's context is done, its tasks still waiting in the pool's
// queue leave it at once, whether or not Wait has been called: they never
// run, a bounded queue has their room back, and [Pool.Status] counts them
// in Canceled.
func (g *Group) Skipped() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.skipped
}

// submit is Go, or TryGo if try is set; it reports whether the group took
// fn.
func (g *Group) submit(fn func(context.Context) error, try bool) bool {
	switch {
	case fn == nil && try:
		return false
	case fn == nil:
		g.record(ErrNilTask)
		return true
	case g.ctx.Err() != nil:
		// Skip fn without bothering the pool.
		g.record(context.Cause(g.ctx))
		return true
	}
	overflow := g.s.cfg.overflow
	if try {
		overflow = Reject
	}
	t := &groupTask{g: g, fn: fn}
	return g.start(t, overflow, try)
}

// start submits w, a task of the group whose claim is g.take and whose
// finish ends with g.ended or g.dropped. If the group's context is done,
// start skips w without bothering the pool; if it ends while start waits
// for room, w is skipped too. A refusal by the pool is recorded as a skipped
// task and the group's error, unless try is set: then start returns false
// and records nothing.
func (g *Group) start(w cancelable, overflow Overflow, try bool) bool {
	if !g.enter() {
		g.record(context.Cause(g.ctx))
		return true
	}
	err := submitWaiter(g.to, g.ctx, w, overflow)
	if err == nil {
		g.track(w)
	}
	switch {
	case err == nil:
		// The pool calls w.finish, unless the group gives w up.
	case err == g.ctx.Err():
		g.leave(true, context.Cause(g.ctx))
	case try:
		g.leave(false, nil)
		return false
	default: // ErrStopped, or ErrQueueFull under Reject
		g.leave(true, err)
	}
	return true
}
