package workerpool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// A Submitter is where [Go], [Map] and a [Group] send work: a [*Pool], a
// [*Subpool] or a [*Level]. Only this package implements it.
type Submitter interface {
	Submit(task func()) error
	SubmitContext(ctx context.Context, task func()) error
	TrySubmit(task func()) error
	SubmitWait(task func()) error
	SubmitKey(key string, task func()) error

	// target returns the pool's state and the sub-pool's lane (nil: the
	// pool's own queue) that submissions go to; priority their level.
	target() (*state, *lane)
	priority() int32
}

func (p *Pool) target() (*state, *lane) { return p.s, nil }
func (p *Pool) priority() int32         { return 0 }

// Submit queues fn to run on a worker and returns without waiting for it.
// Tasks are handed to workers in the order the pool accepted them; with
// more than one worker, a later task may start before an earlier one has.
// While sub-pools have tasks waiting too, the pool's own tasks take turns
// with theirs (see [Pool.Subpool]).
//
// If the waiting queue is bounded and full, Submit waits for room, returns
// [ErrQueueFull] or runs fn itself, as [WithOverflow] says. It returns
// [ErrNilTask] if fn is nil and [ErrStopped] once the pool is stopping.
// Submitting a prepared func allocates nothing.
//
// Calling Submit from inside a task of the same pool can deadlock when the
// queue is bounded and the overflow policy is [Block]: the task waits for
// room, and the room for the task.
func (p *Pool) Submit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	if p.s.cfg.maxWaiting == 0 {
		return p.s.send(message{task: task{Fn: fn}}) // the common case, kept short
	}
	return p.s.submitTo(nil, nil, message{task: task{Fn: fn}}, p.s.cfg.overflow)
}

// SubmitContext is [Pool.Submit] that gives up, returning ctx.Err(), if ctx is
// done before the pool accepts the task: at once if it is already done, or
// while Submit waits for room in a bounded queue. Once accepted, the task
// runs whatever becomes of ctx.
//
// SubmitContext panics if ctx is nil.
func (p *Pool) SubmitContext(ctx context.Context, fn func()) error {
	mustContext("SubmitContext", ctx)
	return p.s.submitContext(nil, 0, ctx, fn)
}

// SubmitCtx is [Pool.SubmitContext], under the name it had first.
//
// Deprecated: use SubmitContext, the standard library's naming
// (signal.NotifyContext, exec.CommandContext). SubmitCtx goes before 1.0.
func (p *Pool) SubmitCtx(ctx context.Context, fn func()) error { return p.SubmitContext(ctx, fn) }

// TrySubmit is [Pool.Submit] that never waits for room, whatever the
// overflow policy: if the bounded waiting queue is full it returns
// [ErrQueueFull]. With an unbounded queue it behaves as Submit.
func (p *Pool) TrySubmit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return p.s.submitTo(nil, nil, message{task: task{Fn: fn}}, Reject)
}

// SubmitWait submits fn as [Pool.Submit] does and waits for it to finish.
// It returns nil once the task returned (or called [runtime.Goexit]), a
// [*PanicError] if it panicked, and [ErrStopped] if the pool was stopping
// before the task was accepted or [Pool.Stop] dropped it before it started.
// Everything the task did happens before SubmitWait returns. It allocates
// one object, of 40 bytes.
//
// Calling SubmitWait from inside a task of the same pool can deadlock.
func (p *Pool) SubmitWait(fn func()) error { return p.s.submitWait(nil, 0, fn) }

// SubmitKey is [Pool.Submit] for a task with a key: tasks submitted to the
// pool with the same key never run at once, and start in the order they
// were submitted. A task whose key is busy waits aside: the other tasks,
// keyed or not, keep the order in which the pool accepted them. It counts
// as waiting, against the bound of [WithMaxWaiting]. A key costs memory
// only while a task with it waits or runs.
//
// A keyed task never runs in its submitter: under [CallerRuns], SubmitKey
// waits for room in a full queue, as under [Block]. So calling SubmitKey
// from inside a task of the same pool can deadlock when the queue is
// bounded, whatever the policy.
func (p *Pool) SubmitKey(key string, fn func()) error { return p.s.submitKey(nil, 0, key, fn) }

// submitContext is the body of SubmitContext for the pool (l nil) or the
// sub-pool of lane l, at a priority level.
func (s *state) submitContext(l *lane, level int32, ctx context.Context, fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	if err := ctx.Err(); err != nil {
		if s.closed.Load() || l != nil && l.closed.Load() {
			return ErrStopped
		}
		return err
	}
	return s.submitTo(l, ctx, message{task: task{Fn: fn}, level: level}, s.cfg.overflow)
}

// submitWait is the body of SubmitWait for the pool (l nil) or the
// sub-pool of lane l, at a priority level.
func (s *state) submitWait(l *lane, level int32, fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	w := &waitTask{fn: fn}
	w.done.Add(1)
	if err := s.submitTo(l, nil, message{task: task{W: w}, level: level}, s.cfg.overflow); err != nil {
		return err
	}
	w.done.Wait()
	return w.err
}

// submitKey is the body of SubmitKey for the pool (l nil) or the sub-pool
// of lane l, at a priority level.
func (s *state) submitKey(l *lane, level int32, key string, fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return s.submitTo(l, nil, message{task: task{Fn: fn}, key: key, keyed: true, level: level}, s.cfg.overflow)
}

// submitWaiter submits w, through to, as SubmitWait does without waiting. If
// it returns nil, the pool calls w.finish exactly once; if not, never.
func submitWaiter(to Submitter, ctx context.Context, w waiter, overflow Overflow) error {
	s, l := to.target()
	return s.submitTo(l, ctx, message{task: task{W: w}, level: to.priority()}, overflow)
}

// submitTo hands m to the loop, for the pool's own queue (l nil) or the
// sub-pool of lane l. ctx may be nil.
//
// A keyed task, or a sub-pool's, never runs in its submitter, whatever the
// policy: beside a task with its key, or beside its sub-pool's tasks, it
// could break the key's order or the sub-pool's limit. Under CallerRuns it
// waits for room, as under Block.
func (s *state) submitTo(l *lane, ctx context.Context, m message, overflow Overflow) error {
	if overflow == CallerRuns && (l != nil || m.keyed) {
		overflow = Block
	}
	if l != nil {
		m.lane = l
		return s.submitGated(l, ctx, m, overflow)
	}
	err := s.submit(ctx, m, overflow, nil)
	if err == errRunHere {
		return s.runHere(m.task)
	}
	return err
}

// submitGated is submit for the sub-pool of lane l. Its submitters hold
// its gate while they submit, so that a Subpool.Stop or StopWait, which
// takes the gate once it is closed, knows that no submission to it is on
// its way.
func (s *state) submitGated(l *lane, ctx context.Context, m message, overflow Overflow) error {
	l.gate.RLock()
	defer l.gate.RUnlock()
	if l.closed.Load() {
		return l.errStopped()
	}
	return s.submit(ctx, m, overflow, l.stopping)
}

// errRunHere is submit's answer when the queue is full and the task is to
// run in its submitter, under CallerRuns.
var errRunHere = errors.New("workerpool: run in the caller")

// submit hands m to the loop. A Block submitter waits while the
// bounded queue is full; the others give up when the loop answers on
// reject. ctx may be nil; so may stop, a sub-pool's stopping.
func (s *state) submit(ctx context.Context, m message, overflow Overflow, stop <-chan struct{}) error {
	if ctx == nil && s.cfg.maxWaiting == 0 {
		return s.send(m)
	}
	if s.closed.Load() {
		return ErrStopped
	}
	// Fast path: the loop is waiting for a task.
	select {
	case s.tasks <- m:
		return nil
	default:
	}
	var reject <-chan struct{}
	if overflow != Block {
		reject = s.reject
	}
	var cancel <-chan struct{}
	if ctx != nil {
		cancel = ctx.Done()
	}
	select {
	case s.tasks <- m:
		// Accepted: it will run, or Stop returns it or tells its waiter.
		return nil
	case <-reject:
		// The bounded queue is full and this submitter does not wait.
		if overflow == CallerRuns {
			return errRunHere
		}
		s.stats.rejected.Add(1)
		if m.lane != nil {
			m.lane.stats.rejected.Add(1)
		}
		return ErrQueueFull
	case <-s.stopping:
		// The loop closed it when it stopped accepting.
		return ErrStopped
	case <-stop:
		// The sub-pool is stopping.
		return m.lane.errStopped()
	case <-cancel:
		// Gave up waiting for room.
		return ctx.Err()
	}
}

// send hands m to the loop of a pool whose queue is unbounded: the
// loop receives whenever it is not busy, so a plain send, cheaper
// than a select, will do. A plain send cannot give up when the pool stops,
// so a submitter first counts itself on its way (state.onWay), then checks
// state.closed: the loop, which sets closed first and then reads the
// count, finishes only once every submitter that got past the check has
// handed its task over. A submitter that sees closed before it counts
// itself does not: else submitters that keep trying a stopped pool could
// keep the count above zero, each preempted between its count and its
// check, and the stop from ever finishing.
func (s *state) send(m message) error {
	if s.closed.Load() {
		return ErrStopped
	}
	c := s.onWay.enter()
	if s.closed.Load() {
		s.leave(c)
		return ErrStopped
	}
	s.tasks <- m
	s.leave(c)
	return nil
}

// leave counts a submitter out of the count c that enter gave it, and, if
// the pool is stopping, tells the loop, which may be waiting for it.
func (s *state) leave(c *atomic.Int64) {
	c.Add(-1)
	if s.closed.Load() {
		s.hand.Signal()
	}
}

// runHere runs t in its submitter, for CallerRuns, unless the pool has
// stopped meanwhile: once it has, nothing is accepted, not even here.
func (s *state) runHere(t task) error {
	if s.closed.Load() {
		return ErrStopped // uncounted, as in send
	}
	c := s.onWay.enter()
	if s.closed.Load() {
		s.leave(c)
		return ErrStopped
	}
	s.stats.callerSubmitted.Add(1)
	s.leave(c)
	if t.W != nil && !t.W.take() {
		return nil // its submitter gave up on it already
	}
	s.run(&entry{Task: t}, nil, nil)
	return nil
}

// A waitTask is SubmitWait's waiter. It is one allocation: done is a
// WaitGroup held by value, not a channel.
type waitTask struct {
	fn   func()
	err  error          // nil, or the task's *PanicError, or ErrStopped; written before done.Done
	done sync.WaitGroup // Add(1) by SubmitWait; Done exactly once, in finish
}

func (w *waitTask) take() bool       { return true } // its submitter never gives up
func (w *waitTask) do(*locals) error { w.fn(); return nil }

// finish records the outcome and releases the waiting caller. Done makes
// everything the task wrote happen before SubmitWait returns.
func (w *waitTask) finish(err error) {
	w.err = err
	w.done.Done()
}

// mustTarget returns s.target(), and panics, naming the function fn, if s
// is nil: a nil interface, or a nil *Pool or *Subpool in one. A nil
// Submitter is a programming error, which would otherwise show as a nil
// dereference, sometimes on a worker, far from its cause.
func mustTarget(fn string, s Submitter) (*state, *lane) {
	if s == nil || s == (*Pool)(nil) || s == (*Subpool)(nil) || s == (*Level)(nil) {
		panic("workerpool: " + fn + ": nil Submitter")
	}
	return s.target()
}
