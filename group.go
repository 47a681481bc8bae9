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

// A group's accounts: each task given to a Group is queued in the pool,
// then running, then ended; or it is skipped. These keep the counts, under
// the group's lock, as the pool moves the task along.

// enter counts a task about to be submitted as queued, unless the group's
// context is done: then it reports false.
func (g *Group) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.ctx.Err() != nil {
		return false
	}
	g.queued++
	return true
}

// track lists w, a task the pool has accepted, among those to give up on
// once the group's context is done; if it is done already, track gives w up
// at once. A task is listed only once accepted, so that giving up on it
// never counts a task the pool refused as canceled.
func (g *Group) track(w cancelable) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.s.giveUp(g.to, []cancelable{w})
		return
	}
	g.entered++
	if t, ok := w.(*groupTask); ok {
		g.mine = append(g.mine, t)
	}
	g.mu.Unlock()
}

// take takes w, a queued task of the group, for the pool (c is its take
// state), and counts it running: from here on it runs, even if the group's
// context is done before it begins, or Stop drops it. Once the context is
// done, take instead gives w up, if nothing did yet: it is canceled, and
// counted so at once, for the dispatcher may not look at the worker's
// report until the next submission comes. The group's close counts it
// skipped with the other queued ones;
// take does not close the group itself, as it may run on the dispatcher,
// which close would wait for.
func (g *Group) take(c *takeState, w cancelable) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.ctx.Err() != nil {
		if w.giveUp() && w.spot().counted.CompareAndSwap(false, true) {
			countCanceled(g.to, 1)
		}
		return false
	}
	if !c.take() {
		return false
	}
	g.queued--
	g.running++
	return true
}

// ended accounts for a task that ran: err is nil or its *PanicError.
func (g *Group) ended(err error) {
	g.mu.Lock()
	g.running--
	first := g.setErrLocked(err)
	g.settleLocked()
	g.mu.Unlock()
	if first {
		g.cancel(err)
	}
}

// dropped accounts for a task taken for the pool that Stop then dropped
// before it began: it is skipped, and ErrStopped is the group's error if it
// is the first.
func (g *Group) dropped() {
	g.mu.Lock()
	g.running--
	g.skipped++
	first := g.setErrLocked(ErrStopped)
	g.settleLocked()
	g.mu.Unlock()
	if first {
		g.cancel(ErrStopped)
	}
}

// leave accounts for a queued task that did not run and never will,
// counting it as skipped if skip is set, and records err (if not nil) as
// the group's error if it is the first. If the group's context was done
// first, close has already counted the task as skipped: then leave only
// takes that back if skip is not set.
func (g *Group) leave(skip bool, err error) {
	g.mu.Lock()
	switch {
	case g.closed && !skip:
		g.skipped--
	case !g.closed:
		g.queued--
		if skip {
			g.skipped++
		}
		g.settleLocked()
	}
	first := g.setErrLocked(err)
	g.mu.Unlock()
	if first {
		g.cancel(err)
	}
}

// close counts every queued task as skipped, once the group's context is
// done, and gives up on those the pool has not started: they leave its
// queue at once. Wait is not released before the pool has counted them
// Canceled, so that once Wait returns the pool's counts balance.
func (g *Group) close() {
	g.mu.Lock()
	ws := g.closeLocked()
	g.mu.Unlock()
	if ws == nil {
		return
	}
	g.s.giveUp(g.to, ws)
	g.mu.Lock()
	g.givingUp = false
	g.settleLocked()
	g.mu.Unlock()
}

// closeLocked marks the group closed and counts its queued tasks as
// skipped, the first time, and returns the tasks to give up on if there
// were any: Wait then waits until close has given them up.
func (g *Group) closeLocked() []cancelable {
	if g.closed {
		return nil
	}
	g.closed = true
	if g.queued == 0 {
		return nil
	}
	g.skipped += g.queued
	g.queued = 0
	// The tasks did not succeed: unless one failed first, the context's
	// cause (the parent's, or Canceled after Wait) is the group's error.
	// The context is done already.
	g.setErrLocked(context.Cause(g.ctx))
	ws := make([]cancelable, 0, len(g.mine)+g.entered)
	for _, t := range g.mine {
		ws = append(ws, t)
	}
	if g.items != nil {
		for i := range g.entered {
			ws = append(ws, g.items.item(i))
		}
	}
	g.mine = nil
	g.givingUp = true
	return ws
}

// settleLocked releases Wait once no task is queued or running and no
// give-up is under way.
func (g *Group) settleLocked() {
	if g.waitCalled && g.queued+g.running == 0 && !g.givingUp {
		select {
		case <-g.idle: // released already
		default:
			close(g.idle)
		}
	}
}

// record counts a task as skipped, and err as the group's error if it is
// the first.
func (g *Group) record(err error) {
	g.mu.Lock()
	g.skipped++
	first := g.setErrLocked(err)
	g.mu.Unlock()
	if first {
		g.cancel(err)
	}
}

// fail records err as the group's error if it is the first, and cancels the
// group's context with it as the cause.
func (g *Group) fail(err error) {
	g.mu.Lock()
	first := g.setErrLocked(err)
	g.mu.Unlock()
	if first {
		g.cancel(err)
	}
}

// setErrLocked records err, if not nil, as the group's error if it is the
// first, and reports whether it was.
func (g *Group) setErrLocked(err error) bool {
	if err == nil || g.err != nil {
		return false
	}
	g.err = err
	return true
}

// firstErr returns the group's error.
func (g *Group) firstErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// A groupTask is the waiter of one task given to [Group.Go]: 40 bytes.
type groupTask struct {
	takeState
	where queueSpot
	g     *Group
	fn    func(context.Context) error
}

func (t *groupTask) spot() *queueSpot { return &t.where }

// take is waiter.take: see Group.take.
func (t *groupTask) take() bool { return t.g.take(&t.takeState, t) }

// do runs fn with the group's context.
func (t *groupTask) do(*locals) error {
	if err := t.fn(t.g.ctx); err != nil {
		t.g.fail(err)
	}
	return nil
}

func (t *groupTask) finish(err error) {
	if err == ErrStopped { // dropped by Stop before it began
		t.g.dropped()
		return
	}
	t.g.ended(err)
}
