package workerpool

import "context"

// A group's accounts: each task given to a Group is queued in the pool,
// then running, then ended; or it is skipped. These keep the counts, under
// the group's lock, as the pool moves the task along.

// enter counts w, a task about to be submitted, as queued, unless the
// group's context is done: then it reports false.
func (g *Group) enter(w cancelable) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.ctx.Err() != nil {
		return false
	}
	g.queued++
	g.entered++
	if t, ok := w.(*groupTask); ok {
		g.mine = append(g.mine, t)
	}
	return true
}

// begin starts a queued task on a worker, and reports whether it may run:
// not once the group's context is done.
func (g *Group) begin() bool {
	g.mu.Lock()
	switch {
	case g.closed:
		g.mu.Unlock()
		return false // counted as skipped by close
	case g.ctx.Err() != nil:
		queued := g.closeLocked() // counts this one too
		g.mu.Unlock()
		if queued {
			g.giveUpQueued() // the others leave the queue
		}
		return false
	}
	g.queued--
	g.running++
	g.mu.Unlock()
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
// queue at once.
func (g *Group) close() {
	g.mu.Lock()
	queued := g.closeLocked()
	g.mu.Unlock()
	if queued {
		g.giveUpQueued()
	}
}

// closeLocked marks the group closed and counts its queued tasks as
// skipped, and reports whether there were any, the first time.
func (g *Group) closeLocked() (queued bool) {
	if g.closed {
		return false
	}
	g.closed = true
	if g.queued > 0 {
		g.skipped += g.queued
		g.queued = 0
		// The tasks did not succeed: unless one failed first, the
		// context's cause (the parent's, or Canceled after Wait) is the
		// group's error. The context is done already.
		g.setErrLocked(context.Cause(g.ctx))
		g.settleLocked()
		return true
	}
	return false
}

// giveUpQueued takes back from the pool the group's tasks that no worker
// has started, once the group is closed: they never run, and leave the
// queue at once.
func (g *Group) giveUpQueued() {
	g.mu.Lock()
	ws := make([]cancelable, 0, len(g.mine))
	for _, t := range g.mine {
		ws = append(ws, t)
	}
	if g.items != nil {
		for i := range g.entered {
			ws = append(ws, g.items.item(i))
		}
	}
	g.mine = nil
	g.mu.Unlock()
	g.p.giveUp(ws)
}

// settleLocked releases Wait once no task is queued or running.
func (g *Group) settleLocked() {
	if g.waitCalled && g.queued+g.running == 0 {
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
	claimState
	where queueSpot
	g     *Group
	fn    func(context.Context) error // nil once skipped by do
}

func (t *groupTask) spot() *queueSpot { return &t.where }

// do runs fn with the group's context, unless that is done: then fn is
// skipped. A task that has started is never skipped.
func (t *groupTask) do(*locals) {
	if !t.g.begin() {
		t.fn = nil
		return
	}
	if err := t.fn(t.g.ctx); err != nil {
		t.g.fail(err)
	}
}

func (t *groupTask) finish(err error) {
	switch {
	case err == ErrStopped: // dropped by Stop before it started
		t.g.leave(true, err)
	case t.fn != nil: // it ran
		t.g.ended(err)
	}
}
