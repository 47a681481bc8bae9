// Package workerpool runs func() tasks on a bounded, self-sizing set of
// worker goroutines.
//
// [New] makes a [Pool] that starts workers as tasks arrive, up to a
// maximum, queues the tasks that find every worker busy, and lets workers
// that stay idle exit. [Pool.Submit] queues a task; [Pool.SubmitWait] also
// waits for it. Stop the pool when done:
//
//	p := workerpool.New(8)
//	for _, job := range jobs {
//		if err := p.Submit(func() { process(job) }); err != nil {
//			return err
//		}
//	}
//	p.StopWait() // run everything submitted, then release the workers
//
// A submission fails with [ErrStopped] once the pool is stopping and with
// [ErrNilTask] for a nil func. If [WithMaxWaiting] bounds the queue, a
// submission to a full one waits for room ([Block], the default), fails
// with [ErrQueueFull] ([Reject]) or runs the task itself ([CallerRuns]), as
// [WithOverflow] says; [Pool.TrySubmit] never waits, and
// [Pool.SubmitContext] gives up when its context is done.
//
// # Stopping
//
// [Pool.StopWait] runs every task accepted. [Pool.Stop] lets running tasks
// finish and drops the rest: it returns the dropped tasks that no caller
// waits for (those of Submit, SubmitContext, TrySubmit, SubmitKey and
// [Local.Submit]), in the order the pool accepted them; the others go to
// their waiters as [ErrStopped]. [Pool.Shutdown] is
// StopWait until its context is done, then Stop: give it a context of its
// own, not one a signal has already cancelled. All three may be called
// more than once, concurrently, and from a task of the pool, whose worker
// then lends its place while it waits, so that the queue still runs (see
// [Pool.StopWait]).
//
// # Results, sub-pools and keys
//
// [Go] returns a [Future] for a func's result. [Call] waits for one unless
// its context is done first, and a func not yet started then leaves the
// queue. A [Group] collects the first error of related tasks, as errgroup
// does. [Map] runs a func on every item of a slice and fails fast; [MapSeq]
// yields every item's result or error, in order. A panic comes back to the
// task's waiter as a [*PanicError], or goes to the panic handler
// ([WithPanicHandler]).
//
// [Pool.Subpool] returns the sub-pool of a name, a queue whose tasks use at
// most its limit of the pool's workers; as workers come free the queues
// take turns, so a flood in one holds up no other. [Pool.SubmitKey] runs
// the tasks of a key one at a time, in the order submitted. A [Local]
// gives each worker a state of its own, such as a connection.
//
// [Pool.SetRate], [Subpool.SetRate] and SetKeyRate pace the starts of the
// pool's tasks, a sub-pool's or each key's, as golang.org/x/time/rate does
// ([Limit], [Every], a burst); a task a rate holds back waits in its
// queue, never on a worker. [Pool.Priority] and [Subpool.Priority] return
// a [Level], a [Submitter] whose tasks go before the lower levels' of
// their queue. [WithWeight] gives a sub-pool more turns than the others.
// A pool that uses none of them pays nothing for them.
//
// # Promises
//
//   - At most the maximum of tasks run at once, and at most a sub-pool's
//     limit of its tasks. Each queue hands tasks out in the order it
//     accepted them, but for those whose key is busy.
//   - Every accepted task runs once, is returned by Stop or Shutdown, or
//     its waiter gave up on it or learns that it did not run.
//   - A task's recovered panic, or its [runtime.Goexit], costs the pool no
//     worker.
//   - When Stop, StopWait or Shutdown returns, every goroutine the pool
//     started has exited (called from a task: all but its worker).
//   - [Pool.Status] never waits for the pool.
//   - Misuse, such as an impossible configuration or a nil context, panics
//     at once with a message that starts "workerpool: " and names the call.
//
// The repository's docs/guarantees.md lists every promise with its tests;
// docs/design.md explains how the pool works inside.
package workerpool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/dispatchkit/workerpool/internal/handoff"
	"github.com/dispatchkit/workerpool/internal/sched"
)

// Errors returned by the pool. Each says why a task was not accepted.
var (
	// ErrStopped is returned by every submission once Stop, StopWait or
	// Shutdown has taken effect, and by SubmitWait when Stop dropped its
	// task before it started.
	ErrStopped = errors.New("workerpool: pool is stopped")
	// ErrQueueFull is returned when the bounded waiting queue is full and
	// the submission does not wait: by TrySubmit, or by any submission
	// under the Reject overflow policy.
	ErrQueueFull = errors.New("workerpool: waiting queue is full")
	// ErrNilTask is returned when the task is a nil func.
	ErrNilTask = errors.New("workerpool: task is nil")
)

// A Pool runs submitted tasks on at most a maximum number of worker
// goroutines. Create one with [New]; its methods are safe for concurrent use.
// A Pool should be stopped with [Pool.Stop], [Pool.StopWait] or
// [Pool.Shutdown] to release its goroutines; one that its user drops
// without stopping runs what it was given and then releases them (see
// [New]).
type Pool struct {
	s *state
	// subpools lists the pool's sub-pools not yet stopped, in the order
	// they were made, and byName holds those not stopping, by name.
	subpools struct {
		mu     sync.Mutex
		list   []*Subpool
		byName map[string]*Subpool
	}
}

// New returns a pool that runs tasks on at most maxWorkers goroutines,
// configured by opts, with its MinWorkers workers already started.
//
// A pool that becomes unreachable without being stopped is stopped as
// [Pool.StopWait] would: once the garbage collector finds it, its queued
// tasks run and its goroutines exit. Its queued tasks keep it reachable if
// they refer to it.
//
// New panics with a "workerpool: " message if the configuration is
// impossible: maxWorkers < 1, a nil option, WithMinWorkers outside
// 0..maxWorkers, a negative WithMaxWaiting or an unknown Overflow.
func New(maxWorkers int, opts ...Option) *Pool {
	cfg := newConfig(maxWorkers, opts)
	s := &state{
		cfg:      cfg,
		epoch:    time.Now(),
		tasks:    make(chan message),
		reject:   make(chan struct{}),
		control:  make(chan *request),
		wake:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		exited:   make(chan struct{}),
	}
	s.hand = handoff.New[entry](cfg.outboxDepth(), maxWorkers, cfg.minWorkers, cfg.idleTimeout, s.wake)
	s.stats.maxWorkers.Store(int64(maxWorkers))
	d := &loop{s: s, h: s.hand, sched: sched.New[waiter](maxWorkers), max: maxWorkers, depth: cfg.outboxDepth(), quiet: true}
	s.own = d.sched.Own()
	// The minimum of workers starts before the loop does, as the loop
	// would start them: nothing else runs yet.
	for range cfg.minWorkers {
		if s.hand.StartIdle() {
			d.startWorker(entry{}, idle)
		}
	}
	go d.run()
	p := &Pool{s: s}
	runtime.AddCleanup(p, (*state).unreachable, s)
	return p
}

// unreachable stops the pool as StopWait would, without waiting, unless it
// was stopped: its user can no longer reach it. It runs on the runtime's
// cleanup goroutine, which must not block; outside any synctest bubble, so
// a pool made in one must be stopped there, as the bubble requires anyway.
func (s *state) unreachable() {
	if !s.stopCalled.Load() && s.drainCalled.CompareAndSwap(false, true) {
		go s.request(&request{kind: drainRequest})
	}
}

// Stop stops the pool now: it accepts no more tasks, lets running tasks
// finish, and drops the tasks still waiting. It returns once every goroutine
// the pool started has finished: each has at most its return left to do.
//
// One call of Stop or [Pool.Shutdown], the first to return, gets the
// dropped fire-and-forget tasks, in the order the pool accepted them, so
// that its caller can run them elsewhere; the others get nil. Dropped
// tasks that a caller waits for are not returned: their waiters get
// [ErrStopped] ([Pool.Shutdown] lists which go where). Stop during a [Pool.StopWait] or [Pool.Shutdown] drops what
// they had left to run, and they return too.
func (p *Pool) Stop() []func() {
	s := p.s
	inside, _ := s.stopper(false)
	if s.stopCalled.CompareAndSwap(false, true) {
		s.request(&request{kind: stopRequest})
	}
	s.waitStopped(inside)
	return s.claimAbandoned()
}

// stopper tells the loop, if the caller is one of the pool's workers, not
// to wait for it to exit, and lends its place until it does, so that other
// workers run the queue (see loop.lend). drains says that the caller's
// stop runs the queue. It reports whether the caller is one of the pool's
// workers, and whether it must not wait for the pool: its stop runs the
// queue, which may need its place, and the cap leaves none to lend.
func (s *state) stopper(drains bool) (inside, pastCap bool) {
	c, maybe := s.whoCalls()
	if !maybe {
		return false, false
	}
	r := &request{kind: stopperRequest, caller: c, drains: drains, done: make(chan struct{})}
	if s.request(r) {
		<-r.done
		return r.isWorker, r.pastCap
	}
	// The loop has finished, so only stoppers still run: the caller is one
	// if the loop started it, or it knows its number.
	return c.by == s.loopID.Load() || s.crew.find(c.id) != nil, false
}

// waitStopped waits for the pool to stop: for every goroutine it started
// to exit, or, if the caller is a stopper, every other one.
func (s *state) waitStopped(stopper bool) {
	<-s.done
	if !stopper {
		<-s.exited
	}
}

// claimAbandoned returns the dropped tasks to its first caller, nil to the
// others. It must be called after done is closed.
func (s *state) claimAbandoned() []func() {
	if !s.claimed.CompareAndSwap(false, true) {
		return nil
	}
	tasks := s.abandoned
	s.abandoned = nil
	return tasks
}

// StopWait stops the pool gracefully: it accepts no more tasks, runs every
// task already accepted, and returns once every goroutine the pool started
// has finished, as Stop does. A [Pool.Stop], or a [Pool.Shutdown] whose ctx
// is done, meanwhile makes it return early, with the rest of the queue
// dropped.
//
// Called by one of the pool's workers (from a task, the panic handler, the
// task observer, or a [Local]'s open or close), a stop waits for every
// goroutine but that worker, which lends its place meanwhile: it counts
// against neither the maximum nor its task's sub-pool limit, so that
// another worker runs the queue; its task's key stays busy. At most as
// many places are lent at once as the maximum. Past that cap, StopWait and
// Shutdown called by a worker return at once (Shutdown with nil, nil, its
// deadline still holding for the pool), since the queue may need the
// place that worker cannot lend; Stop, which drops the queue, still waits.
func (p *Pool) StopWait() {
	s := p.s
	inside, pastCap := s.stopper(true)
	s.drainCalled.Store(true)
	s.request(&request{kind: drainRequest})
	if !pastCap {
		s.waitStopped(inside)
	}
}

// Shutdown is [Pool.StopWait] with a deadline: it accepts no more tasks
// and runs the queued ones until ctx is done, then drops those that have
// not started, as [Pool.Stop] does. Either way it waits for the running
// tasks, and returns once every goroutine the pool started has finished.
// With a ctx that is already done, no queued task starts: on a signal,
// give Shutdown a fresh ctx with a timeout, not the one the signal
// cancelled.
//
// If no accepted task was dropped, Shutdown returns nil, nil, however late
// it returns. Otherwise its error is ctx.Err(), or [ErrStopped] if ctx is
// not done (a concurrent Stop, or another Shutdown's deadline, dropped the
// tasks), and of the dropped tasks:
//   - Those no caller waits for come back in the slice, in the order the
//     pool accepted them: the tasks of Submit, SubmitContext, TrySubmit and
//     SubmitKey, of the pool and its sub-pools, and of [Local.Submit]. They
//     are opaque funcs: run them elsewhere, or count or log them. Only the
//     first Stop or Shutdown to return gets them; the others get nil.
//   - The others go to their waiters as ErrStopped: [Pool.SubmitWait],
//     [Future.Wait], [Call] and [CallWith] return it, a [Group] and [Map]
//     take it as their error if it is the first, and each dropped item of
//     [MapSeq] yields it. So the slice is empty if every dropped task had a
//     waiter.
//
// Of each queue, the tasks that start are the first ones the pool
// accepted, but for those a busy key held back; a task a worker takes just
// as ctx is done may start just after.
//
// Shutdown panics if ctx is nil: for no deadline, call StopWait.
func (p *Pool) Shutdown(ctx context.Context) ([]func(), error) {
	mustContext("Shutdown", ctx)
	s := p.s
	inside, pastCap := s.stopper(true)
	s.drainCalled.Store(true)
	// One request stops accepting and has the loop watch ctx, so that no
	// queued task starts once ctx is done.
	s.request(&request{kind: drainRequest, deadline: ctx.Done()})
	// Once ctx is done, the loop looks at the deadlines, however quiet it
	// is: nothing else may wake it (a long task holds what waits).
	unwatch := context.AfterFunc(ctx, func() { s.request(&request{kind: deadlineRequest}) })
	if pastCap {
		// Its deadline holds for the pool all the same: the watch stays,
		// to wake the loop when it passes, as workers then take nothing
		// from the outbox and only the loop can drop what it holds.
		return nil, nil
	}
	defer unwatch()
	s.waitStopped(inside)
	if !s.dropped {
		return nil, nil
	}
	err := ctx.Err()
	if err == nil {
		err = ErrStopped
	}
	return s.claimAbandoned(), err
}

// Status returns a snapshot of the pool's state and counters. It reads
// atomics only and never waits for the loop, so it can be called from a
// monitoring loop or from inside a task. It costs a read of each worker's
// record: a few nanoseconds a worker.
func (p *Pool) Status() Status { return p.s.status() }

// mustContext panics, naming the function fn, if ctx is nil, as the
// context package does for a nil parent: "Do not pass a nil Context".
func mustContext(fn string, ctx context.Context) {
	if ctx == nil {
		panic("workerpool: " + fn + ": nil context")
	}
}
