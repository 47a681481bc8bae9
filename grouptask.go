package workerpool

import "context"

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
