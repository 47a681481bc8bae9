package workerpool

import (
	"context"
	"errors"
)

// A Submitter is where [Go], [Map] and a [Group] send work: a [*Pool] or a
// [*Subpool]. Only this package implements it.
type Submitter interface {
	Submit(task func()) error
	SubmitCtx(ctx context.Context, task func()) error
	TrySubmit(task func()) error
	SubmitWait(task func()) error
	SubmitKey(key string, task func()) error

	// target returns the pool and the sub-pool (nil: the pool's own
	// lane) that submissions go to.
	target() (*Pool, *Subpool)
}

func (p *Pool) target() (*Pool, *Subpool) { return p, nil }

// Submit queues task to run on a worker and returns without waiting for it.
// Tasks are handed to workers in the order the pool accepted them; with
// more than one worker, a later task may start before an earlier one has.
// While sub-pools have tasks waiting too, the pool's own tasks take turns
// with theirs (see [Pool.Subpool]).
//
// If the waiting queue is bounded and full, Submit waits for room, returns
// [ErrQueueFull] or runs task itself, as [WithOverflow] says. It returns
// [ErrNilTask] for a nil task and [ErrStopped] once the pool is stopping.
// Submitting a prepared func allocates nothing.
func (p *Pool) Submit(task func()) error {
	if task == nil {
		return ErrNilTask
	}
	// Not through submitTo: the common case, kept short.
	if err := p.submit(nil, job{fn: task}, p.cfg.overflow, nil); err != errRunHere {
		return err
	}
	p.runHere(job{fn: task})
	return nil
}

// SubmitCtx is [Pool.Submit] that gives up, returning ctx.Err(), if ctx is
// done before the pool accepts the task: at once if it is already done, or
// while Submit waits for room in a bounded queue. Once accepted, the task
// runs whatever becomes of ctx.
func (p *Pool) SubmitCtx(ctx context.Context, task func()) error {
	return p.submitTask(nil, ctx, task, p.cfg.overflow)
}

// TrySubmit is [Pool.Submit] that never waits for room, whatever the
// overflow policy: if the bounded waiting queue is full it returns
// [ErrQueueFull]. With an unbounded queue it behaves as Submit.
func (p *Pool) TrySubmit(task func()) error { return p.submitTask(nil, nil, task, Reject) }

// SubmitWait submits task as [Pool.Submit] does and waits for it to finish.
// It returns nil once the task returned (or called [runtime.Goexit]), a
// [*PanicError] if it panicked, and [ErrStopped] if the pool was stopping
// before the task was accepted or [Pool.Stop] dropped it before it started.
// Everything the task did happens before SubmitWait returns.
//
// Calling SubmitWait from inside a task of the same pool can deadlock.
func (p *Pool) SubmitWait(task func()) error { return p.submitWait(nil, task) }

// SubmitKey is [Pool.Submit] for a task with a key: tasks submitted to the
// pool with the same key never run at once, and start in the order they
// were submitted. A task whose key is busy waits aside, so that other
// tasks are not held up by it; it counts as waiting, against the bound of
// [WithMaxWaiting]. A key costs memory only while a task with it waits or
// runs.
//
// A keyed task never runs in its submitter: under [CallerRuns], SubmitKey
// waits for room in a full queue, as under [Block].
func (p *Pool) SubmitKey(key string, task func()) error { return p.submitKey(nil, key, task) }

// submitTask is the body of Submit, SubmitCtx and TrySubmit for the pool's
// own lane (s nil) or sub-pool s. ctx may be nil.
func (p *Pool) submitTask(s *Subpool, ctx context.Context, task func(), overflow Overflow) error {
	if task == nil {
		return ErrNilTask
	}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			if p.isStopping() || s != nil && s.closed.Load() {
				return ErrStopped
			}
			return err
		}
	}
	return p.submitTo(s, ctx, job{fn: task}, overflow)
}

// submitWait is the body of SubmitWait for the pool (s nil) or sub-pool s.
func (p *Pool) submitWait(s *Subpool, task func()) error {
	if task == nil {
		return ErrNilTask
	}
	w := &waitTask{fn: task}
	w.done.Add(1)
	if err := p.submitTo(s, nil, job{w: w}, p.cfg.overflow); err != nil {
		return err
	}
	w.done.Wait()
	return w.err
}

// submitKey is the body of SubmitKey for the pool (s nil) or sub-pool s.
func (p *Pool) submitKey(s *Subpool, key string, task func()) error {
	if task == nil {
		return ErrNilTask
	}
	overflow := p.cfg.overflow
	if overflow == CallerRuns {
		overflow = Block // running it in the caller could overlap its key
	}
	return p.submitTo(s, nil, job{fn: task, line: keyed, key: key}, overflow)
}

// submitWaiter submits w, through to, as SubmitWait does without waiting. If
// it returns nil, the pool calls w.finish exactly once; if not, never.
func submitWaiter(to Submitter, ctx context.Context, w waiter, overflow Overflow) error {
	p, s := to.target()
	return p.submitTo(s, ctx, job{w: w}, overflow)
}

// submitTo hands t to the dispatcher for the pool's own lane (s nil) or
// sub-pool s. A sub-pool's submitters hold its gate while they submit, so
// that a Subpool.Stop or StopWait, which takes the gate once it is closed,
// knows that no submission to it is on its way.
//
// A task that CallerRuns runs here runs after the gate is released: a
// Subpool.Stop does not wait for it, and it may stop its own sub-pool.
func (p *Pool) submitTo(s *Subpool, ctx context.Context, t job, overflow Overflow) error {
	var err error
	if s == nil {
		err = p.submit(ctx, t, overflow, nil)
	} else {
		t.lane = s.lane
		err = p.submitGated(s, ctx, t, overflow)
	}
	if err != errRunHere {
		return err
	}
	p.runHere(t)
	return nil
}

// runHere runs t in its submitter, for CallerRuns.
func (p *Pool) runHere(t job) {
	p.stats.callerSubmitted.Add(1)
	if t.lane != nil {
		t.lane.stats.callerSubmitted.Add(1)
	}
	p.run(t, nil)
}

// submitGated is submit for sub-pool s, under its gate.
func (p *Pool) submitGated(s *Subpool, ctx context.Context, t job, overflow Overflow) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed.Load() {
		return ErrStopped
	}
	return p.submit(ctx, t, overflow, s.stopping)
}

// errRunHere is submit's answer when the queue is full and the task is to
// run in its submitter, under CallerRuns.
var errRunHere = errors.New("workerpool: run in the caller")

// submit hands t to the dispatcher. A Block submitter waits while the
// bounded queue is full; the others give up when the dispatcher answers on
// reject. ctx may be nil; so may stop, a sub-pool's stopping.
func (p *Pool) submit(ctx context.Context, t job, overflow Overflow, stop <-chan struct{}) error {
	// Fast path: the dispatcher is waiting for a task.
	select {
	case p.tasks <- t:
		return nil
	default:
	}
	var reject <-chan struct{}
	if overflow != Block {
		reject = p.reject
	}
	var cancel <-chan struct{}
	if ctx != nil {
		cancel = ctx.Done()
	}
	select {
	case p.tasks <- t:
		// Accepted: it will run, or Stop returns it or tells its waiter.
		return nil
	case <-reject:
		// The bounded queue is full and this submitter does not wait.
		if overflow == CallerRuns {
			return errRunHere
		}
		p.stats.rejected.Add(1)
		if t.lane != nil {
			t.lane.stats.rejected.Add(1)
		}
		return ErrQueueFull
	case <-p.stopping:
		// The dispatcher closed it when it stopped receiving tasks.
		return ErrStopped
	case <-stop:
		// The sub-pool is stopping.
		return ErrStopped
	case <-cancel:
		// Gave up waiting for room.
		return ctx.Err()
	}
}
