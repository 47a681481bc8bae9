package workerpool

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
	// queue) that submissions go to.
	target() (*Pool, *Subpool)
}

func (p *Pool) target() (*Pool, *Subpool) { return p, nil }

// mustTarget returns s.target(), and panics, naming the function fn, if s
// is nil: a nil interface, or a nil *Pool or *Subpool in one. A nil
// Submitter is a programming error, which would otherwise show as a nil
// dereference, sometimes on a worker, far from its cause.
func mustTarget(fn string, s Submitter) (*Pool, *Subpool) {
	if s == nil || s == (*Pool)(nil) || s == (*Subpool)(nil) {
		panic("workerpool: " + fn + ": nil Submitter")
	}
	return s.target()
}

// mustContext panics, naming the function fn, if ctx is nil, as the
// context package does for a nil parent: "Do not pass a nil Context".
func mustContext(fn string, ctx context.Context) {
	if ctx == nil {
		panic("workerpool: " + fn + ": nil context")
	}
}

// A message is what travels on Pool.tasks to the dispatcher: a task, with
// where it goes, or a request (req set, and nothing else).
type message struct {
	task
	sub   *Subpool // the task's sub-pool; nil for the pool's own queue
	key   string   // a keyed task's key
	keyed bool     // the task has a key: key, which may be ""
	req   *request
}

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
//
// Calling Submit from inside a task of the same pool can deadlock when the
// queue is bounded and the overflow policy is [Block]: the task waits for
// room, and the room for the task.
func (p *Pool) Submit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	if p.cfg.maxWaiting == 0 {
		return p.send(message{task: task{fn: fn}}) // the common case, kept short
	}
	return p.submitTo(nil, nil, message{task: task{fn: fn}}, p.cfg.overflow)
}

// SubmitCtx is [Pool.Submit] that gives up, returning ctx.Err(), if ctx is
// done before the pool accepts the task: at once if it is already done, or
// while Submit waits for room in a bounded queue. Once accepted, the task
// runs whatever becomes of ctx.
//
// SubmitCtx panics if ctx is nil.
func (p *Pool) SubmitCtx(ctx context.Context, fn func()) error {
	mustContext("SubmitCtx", ctx)
	return p.submitCtx(nil, ctx, fn)
}

// TrySubmit is [Pool.Submit] that never waits for room, whatever the
// overflow policy: if the bounded waiting queue is full it returns
// [ErrQueueFull]. With an unbounded queue it behaves as Submit.
func (p *Pool) TrySubmit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return p.submitTo(nil, nil, message{task: task{fn: fn}}, Reject)
}

// SubmitWait submits task as [Pool.Submit] does and waits for it to finish.
// It returns nil once the task returned (or called [runtime.Goexit]), a
// [*PanicError] if it panicked, and [ErrStopped] if the pool was stopping
// before the task was accepted or [Pool.Stop] dropped it before it started.
// Everything the task did happens before SubmitWait returns. It allocates
// one object, of 40 bytes.
//
// Calling SubmitWait from inside a task of the same pool can deadlock.
func (p *Pool) SubmitWait(fn func()) error { return p.submitWait(nil, fn) }

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
func (p *Pool) SubmitKey(key string, fn func()) error { return p.submitKey(nil, key, fn) }

// submitCtx is the body of SubmitCtx for the pool (s nil) or sub-pool s.
func (p *Pool) submitCtx(s *Subpool, ctx context.Context, fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	if err := ctx.Err(); err != nil {
		if p.closed.Load() || s != nil && s.closed.Load() {
			return ErrStopped
		}
		return err
	}
	return p.submitTo(s, ctx, message{task: task{fn: fn}}, p.cfg.overflow)
}

// submitWait is the body of SubmitWait for the pool (s nil) or sub-pool s.
func (p *Pool) submitWait(s *Subpool, fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	w := &waitTask{fn: fn}
	w.done.Add(1)
	if err := p.submitTo(s, nil, message{task: task{w: w}}, p.cfg.overflow); err != nil {
		return err
	}
	w.done.Wait()
	return w.err
}

// submitKey is the body of SubmitKey for the pool (s nil) or sub-pool s.
func (p *Pool) submitKey(s *Subpool, key string, fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return p.submitTo(s, nil, message{task: task{fn: fn}, key: key, keyed: true}, p.cfg.overflow)
}

// submitWaiter submits w, through to, as SubmitWait does without waiting. If
// it returns nil, the pool calls w.finish exactly once; if not, never.
func submitWaiter(to Submitter, ctx context.Context, w waiter, overflow Overflow) error {
	p, s := to.target()
	return p.submitTo(s, ctx, message{task: task{w: w}}, overflow)
}

// submitTo hands m to the dispatcher, for the pool's own queue (s nil) or
// sub-pool s. ctx may be nil.
//
// A keyed task, or a sub-pool's, never runs in its submitter, whatever the
// policy: beside a task with its key, or beside its sub-pool's tasks, it
// could break the key's order or the sub-pool's limit. Under CallerRuns it
// waits for room, as under Block.
func (p *Pool) submitTo(s *Subpool, ctx context.Context, m message, overflow Overflow) error {
	if overflow == CallerRuns && (s != nil || m.keyed) {
		overflow = Block
	}
	if s != nil {
		m.sub = s
		return p.submitGated(s, ctx, m, overflow)
	}
	err := p.submit(ctx, m, overflow, nil)
	if err == errRunHere {
		return p.runHere(m.task)
	}
	return err
}

// submitGated is submit for sub-pool s. Its submitters hold its gate while
// they submit, so that a Subpool.Stop or StopWait, which takes the gate
// once it is closed, knows that no submission to it is on its way.
func (p *Pool) submitGated(s *Subpool, ctx context.Context, m message, overflow Overflow) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed.Load() {
		return ErrStopped
	}
	return p.submit(ctx, m, overflow, s.stopping)
}

// errRunHere is submit's answer when the queue is full and the task is to
// run in its submitter, under CallerRuns.
var errRunHere = errors.New("workerpool: run in the caller")

// submit hands m to the dispatcher. A Block submitter waits while the
// bounded queue is full; the others give up when the dispatcher answers on
// reject. ctx may be nil; so may stop, a sub-pool's stopping.
func (p *Pool) submit(ctx context.Context, m message, overflow Overflow, stop <-chan struct{}) error {
	if ctx == nil && p.cfg.maxWaiting == 0 {
		return p.send(m)
	}
	if p.closed.Load() {
		return ErrStopped
	}
	// Fast path: the dispatcher is waiting for a task.
	select {
	case p.tasks <- m:
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
	case p.tasks <- m:
		// Accepted: it will run, or Stop returns it or tells its waiter.
		return nil
	case <-reject:
		// The bounded queue is full and this submitter does not wait.
		if overflow == CallerRuns {
			return errRunHere
		}
		p.stats.rejected.Add(1)
		if m.sub != nil {
			m.sub.stats.rejected.Add(1)
		}
		return ErrQueueFull
	case <-p.stopping:
		// The dispatcher closed it when it stopped accepting.
		return ErrStopped
	case <-stop:
		// The sub-pool is stopping.
		return ErrStopped
	case <-cancel:
		// Gave up waiting for room.
		return ctx.Err()
	}
}

// send hands m to the dispatcher of a pool whose queue is unbounded: the
// dispatcher receives whenever it is not busy, so a plain send, cheaper
// than a select, will do. A plain send cannot give up when the pool stops,
// so a submitter first counts itself on its way (p.onWay), then checks
// p.closed: the dispatcher, which sets p.closed first and then reads the
// count, finishes only once every submitter that got past the check has
// handed its task over. A submitter that sees p.closed before it counts
// itself does not: else submitters that keep trying a stopped pool could
// keep the count above zero, each preempted between its count and its
// check, and the stop from ever finishing.
func (p *Pool) send(m message) error {
	if p.closed.Load() {
		return ErrStopped
	}
	c := p.onWay.enter()
	if p.closed.Load() {
		p.leave(c)
		return ErrStopped
	}
	p.tasks <- m
	p.leave(c)
	return nil
}

// leave counts a submitter out of the count c that enter gave it, and, if
// the pool is stopping, tells the dispatcher, which may be waiting for it.
func (p *Pool) leave(c *atomic.Int64) {
	c.Add(-1)
	if p.closed.Load() {
		p.signal()
	}
}

// onWay counts the submitters on their way to the dispatcher, on several
// counters, each on its cache line: one shared counter, which every
// submitter writes twice per task, would have them wait for each other's
// writes. A submitter picks one at random; the dispatcher adds them up,
// only once the pool is stopping.
type onWay struct {
	counts [onWayCounts]struct {
		n atomic.Int64
		_ [cacheLine - 8]byte
	}
}

// onWayCounts is how many counters onWay keeps: enough that a few busy
// submitters seldom share one.
const onWayCounts = 8

// enter counts a submitter on its way, and returns the counter it must
// leave.
func (o *onWay) enter() *atomic.Int64 {
	c := &o.counts[rand.Uint32()%onWayCounts].n
	c.Add(1)
	return c
}

// empty reports whether no submitter is on its way. Read after closed is
// set, it is exact: a submitter that counts itself after its counter was
// read sees closed, and leaves without sending.
func (o *onWay) empty() bool {
	for i := range o.counts {
		if o.counts[i].n.Load() != 0 {
			return false
		}
	}
	return true
}

// runHere runs t in its submitter, for CallerRuns, unless the pool has
// stopped meanwhile: once it has, nothing is accepted, not even here.
func (p *Pool) runHere(t task) error {
	if p.closed.Load() {
		return ErrStopped // uncounted, as in send
	}
	c := p.onWay.enter()
	if p.closed.Load() {
		p.leave(c)
		return ErrStopped
	}
	p.stats.callerSubmitted.Add(1)
	p.leave(c)
	if t.w != nil && !t.w.take() {
		return nil // its submitter gave up on it already
	}
	p.run(&entry{task: t}, nil)
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
