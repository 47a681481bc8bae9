// Package workerpool runs func() tasks on a bounded, self-sizing set of
// worker goroutines.
//
// A [Pool] starts workers as tasks arrive, up to a maximum, queues the tasks
// that find every worker busy, and stops workers that stay idle.
//
//	p := workerpool.New(8)
//	for _, job := range jobs {
//		p.Submit(func() { process(job) })
//	}
//	p.StopWait() // run everything submitted, then release the workers
//
// [Pool.SubmitWait] waits for its task; [Go] returns a [Future] for a
// task's result; [Call] returns a result unless a context cuts it short; a
// [Group] collects the first error of related tasks, as errgroup does;
// [Map] runs a func on every item of a slice. A [Subpool] gives one kind of
// work its own limit on the pool's workers, [Pool.SubmitKey] keeps the
// tasks of one key in order, one at a time, and a [Local] gives each
// worker a state of its own.
//
// # Design
//
// One dispatcher goroutine owns the pool's structure: the waiting tasks and
// the count of workers. Submitters hand it tasks over an unbuffered channel,
// so a task is accepted exactly when the dispatcher takes it. Workers wait
// for tasks on a second channel, longest idle first, whose small buffer
// (the hand-off buffer) lets a worker that comes free take its next task
// without waiting for the dispatcher. What goes through it is a slot of a
// ring, which holds the task, and a number: the worker that receives it
// claims it with one compare-and-swap, and the dispatcher, to take it back
// (to pause, stop, or give another queue its turn), revokes it with
// another; one of the two wins. The dispatcher gives a task to an idle
// worker if there is one, else starts a worker if fewer than the maximum
// exist, else queues it. Which queued task goes next is decided by a
// scheduler of plain data, which the dispatcher asks and which never acts.
//
// The waiting queue is unbounded unless [WithMaxWaiting] bounds it; then
// [WithOverflow] chooses what a submission to a full queue does: wait
// ([Block], the default), fail with [ErrQueueFull] ([Reject]) or run in the
// caller ([CallerRuns]).
//
// # Order
//
// The pool has a queue of its own, and each sub-pool one. Within a queue,
// tasks are handed to workers in the order the pool accepted them, except
// that a task whose key is busy (a task with the same key is running)
// waits for it; the queue's other tasks, keyed or not, do not. While a busy
// key holds a task back, the tasks behind it go only to a free worker,
// never to wait ahead of it, so that once its key is free it goes next.
// When several queues have a task that may start, they take turns, round
// robin, as workers come free; a sub-pool at its limit is passed over,
// keeping its place, until one of its tasks ends. The dispatcher hands the
// next tasks out ahead of the workers, to the buffer, in the order of their
// turns, and takes back those no worker has taken when the turns change:
// when a task comes to a queue that had none waiting, it goes after one
// turn of each queue already waiting; a sub-pool freed from its limit, or
// whose tasks all waited for a busy key, takes its place back. The tasks
// that workers had taken by then (at most one each, and those they take in
// the moment before the dispatcher sees the change) start first. With more
// than one worker, a task may of course start before an earlier one has:
// a worker handed a task may wait for a processor while the others run
// many.
//
// # Shutdown
//
// A pool must be stopped to release its goroutines. [Pool.StopWait] runs
// everything already submitted and waits; [Pool.Stop] lets running tasks
// finish, drops the queue and returns the dropped tasks, of every queue, in
// the order the pool accepted them; [Pool.Shutdown] is StopWait with a
// deadline, after which it acts as Stop. All three are safe to call more
// than once and concurrently with each other and with submissions; Stop
// during a StopWait makes both return early. Once any of them has taken
// effect, at the latest when it returns, every submission fails with
// [ErrStopped], and a [Pool.SubmitWait] whose task was dropped returns
// ErrStopped. When they return, every goroutine the pool started has
// exited, or has at most its return left to do.
//
// Called by one of the pool's own workers (in a task, the panic handler,
// the task observer, or a [Local]'s open or close), Stop, StopWait and
// Shutdown do the same, but do not wait for that worker, which would wait
// for itself: they return once every other goroutine the pool started has
// exited, but workers that wait in a sub-pool's Stop or StopWait for a task
// that waits so (see [Subpool.Stop]), and the worker exits once it returns
// to the pool. Called elsewhere meanwhile, they wait for those workers
// too: for the rest of their tasks. While it waits, the worker does not
// count against the maximum (nor against a Resize that lowers it): the
// pool may start a worker in its place, so that StopWait from the pool's
// only worker still runs the queue. But a task keeps its sub-pool's place
// and its key while it waits, and a sub-pool's Stop or StopWait returns
// once it has ended. So if every task still running waits so, or waits in
// a sub-pool's Stop or StopWait for such tasks, and every queued task
// waits for one of them to end (for its sub-pool's place, or its key), no
// queued task can ever start: the pool drops them, as Stop does (they
// count as Abandoned, a SubmitWait whose task it drops returns
// ErrStopped, and Shutdown returns them with ErrStopped), rather than
// wait for ever. Telling the pool's workers from other goroutines costs
// these calls a read of their caller's stack trace, a few microseconds.
//
// Other calls that wait for the pool can deadlock from inside a task of the
// same pool: the task waits for the pool, and the pool for the task.
// SubmitWait, Call, a Future's Wait, a Group's Wait, Map, and a sub-pool's
// Stop or StopWait, when every worker is busy with tasks that wait so;
// Pause with a ctx that is never done; a Submit when the queue is bounded
// and the policy is [Block], and a SubmitKey or a sub-pool's submission
// under any policy of a bounded queue.
//
// # Panics
//
// A task that panics does not take its worker down: the pool recovers the
// panic as a [*PanicError] with the stack, and either returns it from
// SubmitWait or passes it to the panic handler (see [WithPanicHandler]),
// which by default logs it. A task that calls [runtime.Goexit] likewise
// costs no capacity; but a task that [CallerRuns] runs in its submitter
// ends the submitter's goroutine if it calls Goexit, so that its Submit
// never returns. A panic in the panic handler ends the program, wherever
// the task ran. The pool itself panics only on a programming error, at
// once, with a message that starts "workerpool: " and names the function:
// an impossible configuration in [New], a [Pool.Resize] to an impossible
// size, or a nil context, [Submitter] or [Local]. A nil task is not one
// of them: it is refused with [ErrNilTask].
//
// # Idle workers
//
// A worker idle for the idle timeout ([WithIdleTimeout], [DefaultIdleTimeout]
// by default; negative: never) exits between one and two timeouts after it
// went idle. The longest-idle worker takes the next task, so a load spread
// over more workers than it needs keeps them all in use until it drops.
// [WithMinWorkers] starts that many workers in New and keeps them; the
// reaping clock runs only while there are more. A worker busy in a panic
// handler is not reaped, though [Status] counts it Idle: its task has
// completed. [Pool.Pause] holds the queue until its context is done, and
// [Pool.Resize] changes the maximum: surplus workers exit as their tasks end.
//
// # Sub-pools and keys
//
// [Pool.Subpool] makes a queue of its own with a limit: at most that many
// of its tasks run at once, on the pool's workers. When a worker comes
// free, the queues with a task that may start take turns (see Order), so a
// flood in one does not hold up the others. A sub-pool's task never runs
// in its submitter: under CallerRuns it waits for room. [Subpool.Stop] and
// [Subpool.StopWait] stop it alone, and wait only for its own tasks.
// [Pool.SubmitKey] (and [Subpool.SubmitKey]) runs the tasks of one key one at
// a time, in the order submitted; tasks with other keys run alongside. Once
// a key's last task has ended, the pool keeps nothing of it but a line in a
// small cache of unused ones.
//
// # Rates, levels and weights
//
// [Pool.SetRate], [Subpool.SetRate] and their SetKeyRate pace the starts of
// the pool's tasks, a sub-pool's, or each key's, as golang.org/x/time/rate
// does ([Limit], [Every], a burst): a task that a rate holds back waits in
// its queue, counted Waiting and Paced, never on a worker, and takes its
// token as a worker starts it. [Pool.Priority] and [Subpool.Priority]
// return a [Level], a [Submitter] whose tasks go before the lower levels'
// of their queue; queues still take turns, and a key's tasks keep their
// order whatever their levels. [WithWeight] gives a sub-pool more turns
// than the others, in proportion, interleaved. The rules live in the
// dispatcher's scheduler: a pool that uses none of them pays nothing for
// them, and one with no rate reads no clock for them.
//
// # Futures, Groups, Map and Call
//
// [Go] submits a func with a result and returns a [Future]; [Pool.Group]
// (or [Subpool.Group]) collects the first error of related tasks, cancels
// their context, and skips the tasks no worker has taken once it is done;
// [Map] runs a func on every item of a slice, at most twice the pool's (or
// sub-pool's) size at a time, and returns the results in input order.
// [Call] runs a func unless its context is done first: a call whose
// context ends while it waits leaves the queue at once and is counted
// Canceled; one whose context ends while it runs returns at once, and the
// worker stays Busy until the func returns. Each reports a panic as a
// [*PanicError] and a stopped pool as [ErrStopped].
//
// # Per-worker state
//
// A [Local] holds a state per worker, such as a connection or a scratch
// buffer: [NewLocal] takes the funcs that open and close it. A worker opens
// its state before its first task that asks for it ([CallWith],
// [Local.Submit]), hands it to each task it runs, one at a time, and closes
// it when it exits, whatever the reason: idle, Resize, Stop, StopWait or
// Shutdown. A failed open goes to the task's waiter (or the panic handler)
// and the pool keeps working. So the states follow the workers down when
// idle ones are reaped.
//
// # Observability
//
// [Pool.Status] and [Subpool.Status] read counters and gauges without
// waiting for the dispatcher; at rest, Submitted = Completed + Abandoned +
// Canceled + Waiting + Busy. [WithTaskTimings] adds how long tasks waited and
// ran, and [WithTaskObserver] hands each task's timing to a func. The
// module github.com/dispatchkit/workerpool/prom exports all of it to
// Prometheus.
//
// # Costs
//
// A Submit of a prepared func allocates nothing; SubmitWait allocates one
// waiter, Go the Future, Call its record and a channel, Group.Go one task,
// and Map nothing per item. A waiting task costs 12 bytes of queue beyond
// its closure, 16 with task timings, however the tasks of its queue and
// others' interleave; a queue grows by doubling, so it may hold as much
// again in spare room. A sub-pool's tasks and keyed tasks cost a report to
// the dispatcher when they end; other tasks do not. Turns cost the same
// however many sub-pools there are. Timings cost three clock reads per
// task, and nothing when off. The README and benchmarks/RESULTS.md give the
// measured figures.
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
	// they were made.
	subpools struct {
		mu   sync.Mutex
		list []*Subpool
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
// [Pool.SubmitWait] tasks are not returned: their callers get
// [ErrStopped]. Stop during a [Pool.StopWait] or [Pool.Shutdown] drops what
// they had left to run, and they return too.
func (p *Pool) Stop() []func() {
	s := p.s
	inside := s.stopper()
	if s.stopCalled.CompareAndSwap(false, true) {
		s.request(&request{kind: stopRequest})
	}
	s.waitStopped(inside)
	return s.claimAbandoned()
}

// stopper tells the loop, if the caller is one of the pool's workers, not
// to wait for it to exit, and lends its place until it does, so that other
// workers run the queue (see loop.lend). It reports whether the caller is
// one of the pool's workers.
func (s *state) stopper() bool {
	c, maybe := s.whoCalls()
	if !maybe {
		return false
	}
	r := &request{kind: stopperRequest, caller: c, done: make(chan struct{})}
	if s.request(r) {
		<-r.done
		return r.isWorker
	}
	// The loop has finished, so only stoppers still run: the caller is one
	// if the loop started it, or it knows its number.
	return c.by == s.loopID.Load() || s.crew.find(c.id) != nil
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
func (p *Pool) StopWait() {
	s := p.s
	inside := s.stopper()
	s.drainCalled.Store(true)
	s.request(&request{kind: drainRequest})
	s.waitStopped(inside)
}

// Shutdown is [Pool.StopWait] bounded by ctx: it accepts no more tasks and
// runs the queued ones until ctx is done. Then it drops the rest, as
// [Pool.Stop] does, and with a ctx that is already done none starts at
// all. The tasks that start are, in each queue, the first ones the pool
// accepted, but for those a busy key held back; a task a worker takes just
// as ctx is done may start just after. Either way Shutdown waits for the
// running tasks and returns once every goroutine the pool started has
// finished, as Stop does.
//
// Shutdown returns nil, nil if no accepted task was dropped, however late
// it returns. If tasks were dropped, it returns the dropped fire-and-forget
// tasks (unless another Stop or Shutdown call got them first, see
// [Pool.Stop]) and ctx.Err(), or [ErrStopped] if ctx is not done: then a
// concurrent Stop, or another Shutdown's deadline, dropped them.
//
// Shutdown panics if ctx is nil: for no deadline, call StopWait.
func (p *Pool) Shutdown(ctx context.Context) ([]func(), error) {
	mustContext("Shutdown", ctx)
	s := p.s
	inside := s.stopper()
	s.drainCalled.Store(true)
	// One request stops accepting and has the loop watch ctx, so that no
	// queued task starts once ctx is done.
	s.request(&request{kind: drainRequest, deadline: ctx.Done()})
	// Once ctx is done, the loop looks at the deadlines, however quiet it
	// is: nothing else may wake it (a long task holds what waits).
	unwatch := context.AfterFunc(ctx, func() { s.request(&request{kind: deadlineRequest}) })
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
