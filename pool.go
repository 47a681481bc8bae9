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
	"sync"
	"sync/atomic"
	"time"
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
// A Pool must be stopped with [Pool.Stop], [Pool.StopWait] or
// [Pool.Shutdown] to release its goroutines.
type Pool struct {
	cfg config // fixed at New

	// tasks carries submissions and requests to the dispatcher. It is
	// unbuffered, so that a task is accepted exactly when the dispatcher
	// takes it; the dispatcher receives only while it can place the task,
	// so that Block submitters wait in their send while a bounded queue is
	// full.
	tasks chan message
	// reject is sent on by the dispatcher, only while the bounded queue is
	// full, to tell submitters that do not wait to give up.
	reject chan struct{}
	// control carries requests to the dispatcher while it does not
	// receive on tasks.
	control chan *request
	// work carries hand-offs from the dispatcher to the workers: tasks,
	// each in a slot that a worker claims, and quits. A send on it goes to
	// the worker parked longest, if one is; else into its buffer, the
	// hand-off buffer (see handoff.go). Closing it tells the workers to
	// exit once the pool has stopped.
	work chan handOff
	// listening says that the dispatcher waits for the workers: a worker
	// that claims a hand-off or ends a task then tells it, on wake (buffer
	// 1), as does a submitter leaving a stopping pool. Only the dispatcher
	// writes it; it is false in the common case.
	listening atomic.Bool
	wake      chan struct{}
	// tick is the reaping clock, advanced by the dispatcher; workers stamp
	// it when they go idle.
	tick atomic.Uint64

	// closed is set by the dispatcher once the pool accepts no more
	// submissions, just before it closes stopping.
	closed atomic.Bool
	// stopCalled is won by the first Stop, drainCalled by the first
	// StopWait or Shutdown; each then sends its request.
	stopCalled, drainCalled atomic.Bool
	// stopping is closed by the dispatcher once it accepts nothing more;
	// closing when its loop has ended and it tells the workers to exit, so
	// that its clock gives up; done as its last act, after every goroutine
	// the pool started has exited, but the stoppers. exited is closed once
	// the stoppers have exited too, by the last goroutine to go, once
	// ended is set (see gone).
	stopping, closing, done, exited chan struct{}
	ended, exitedClosed             atomic.Bool

	// live counts the pool's goroutines other than the dispatcher: workers
	// and the reaping clock. Each counts itself out as its last act, and
	// tells the dispatcher, which waits for them before it closes done: for
	// all of them but the stoppers, workers that called Stop, StopWait or
	// Shutdown themselves (see stopper).
	live atomic.Int64
	// dispatcherID is the dispatcher goroutine's number: every worker it
	// starts says so in its stack trace (see onWorker).
	dispatcherID atomic.Uint64

	// abandoned holds the fire-and-forget tasks that Stop or a Shutdown
	// deadline dropped, in the order the pool accepted them, and dropped
	// says whether any task was dropped, waiters included. The dispatcher
	// writes both before closing done; they are read after it, abandoned
	// by the first caller to win claimed.
	abandoned []func()
	dropped   bool
	claimed   atomic.Bool

	// epoch is when the pool was made: its tasks' timings count from it
	// in nanoseconds; timings sums them up, with WithTaskTimings.
	epoch   time.Time
	timings taskTimings

	// subpools lists the pool's sub-pools not yet stopped, in the order
	// they were made.
	subpools struct {
		mu   sync.Mutex
		list []*Subpool
	}

	// The fields below are written by submitters and workers as tasks come
	// and go: each on cache lines of its own, apart from the fields above,
	// which every worker and submitter reads for every task.
	_ [cacheLine]byte
	// onWay counts the submitters that found closed unset and have not
	// yet handed their task over (or registered a CallerRuns task): the
	// dispatcher finishes only once there are none, so that every
	// submission it let through is taken.
	onWay onWay
	// reports carries the ends of sub-pools' and keyed tasks from the
	// workers to the dispatcher.
	reports reports
	_       [cacheLine - 32]byte

	stats stats
}

// New returns a pool that runs tasks on at most maxWorkers goroutines,
// configured by opts, with its MinWorkers workers already started.
//
// New panics with a "workerpool: " message if the configuration is
// impossible: maxWorkers < 1, a nil option, WithMinWorkers outside
// 0..maxWorkers, a negative WithMaxWaiting or an unknown Overflow.
func New(maxWorkers int, opts ...Option) *Pool {
	cfg := newConfig(maxWorkers, opts)
	buffer := handOffBuffer
	if cfg.maxWaiting > 0 {
		// Buffered tasks wait too: the bound covers them.
		buffer = min(buffer, cfg.maxWaiting)
	}
	p := &Pool{
		cfg:      cfg,
		epoch:    time.Now(),
		tasks:    make(chan message),
		reject:   make(chan struct{}),
		control:  make(chan *request),
		work:     make(chan handOff, buffer),
		wake:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		exited:   make(chan struct{}),
	}
	p.stats.maxWorkers.Store(int64(maxWorkers))
	p.stats.retireAbove.Store(int64(maxWorkers))
	d := &dispatcher{p: p, max: maxWorkers, sched: newScheduler(maxWorkers), quiet: true}
	d.out.init(buffer)
	d.clock.timeout = p.cfg.idleTimeout
	d.publishWorkers()
	started := make(chan struct{})
	go d.run(started)
	<-started // with the minimum of workers
	return p
}

// Stop stops the pool now: it accepts no more tasks, lets running tasks
// finish, and drops the tasks still waiting. It returns once every goroutine
// the pool started has finished: each has at most its return left to do.
//
// One call of Stop or [Pool.Shutdown], the first to return, gets the
// dropped fire-and-forget tasks, in the order the pool accepted them, so
// that its caller can run them elsewhere or save them; the others get nil.
// Dropped [Pool.SubmitWait] tasks are not returned: their callers get
// [ErrStopped]. Stop during a [Pool.StopWait] or [Pool.Shutdown] drops what
// they had left to run, and they return too.
func (p *Pool) Stop() []func() {
	inside := p.stopper()
	if p.stopCalled.CompareAndSwap(false, true) {
		p.request(&request{kind: stopRequest})
	}
	p.waitStopped(inside)
	return p.claimAbandoned()
}

// waitStopped waits for the pool to stop: for every goroutine it started
// to exit, or, if the caller is a stopper, every other one.
func (p *Pool) waitStopped(stopper bool) {
	<-p.done
	if !stopper {
		<-p.exited
	}
}

// claimAbandoned returns the dropped tasks to its first caller, nil to the
// others. It must be called after p.done is closed.
func (p *Pool) claimAbandoned() []func() {
	if !p.claimed.CompareAndSwap(false, true) {
		return nil
	}
	tasks := p.abandoned
	p.abandoned = nil
	return tasks
}

// StopWait stops the pool gracefully: it accepts no more tasks, runs every
// task already accepted, and returns once every goroutine the pool started
// has finished, as Stop does. A [Pool.Stop], or a [Pool.Shutdown] whose ctx
// is done, meanwhile makes it return early, with the rest of the queue
// dropped.
func (p *Pool) StopWait() {
	inside := p.stopper()
	p.drainCalled.Store(true)
	p.request(&request{kind: drainRequest})
	p.waitStopped(inside)
}

// Shutdown is [Pool.StopWait] bounded by ctx: it accepts no more tasks and
// runs the queued ones until ctx is done. Then it drops the rest, as
// [Pool.Stop] does, and with a ctx that is already done none starts at
// all. The dispatcher decides, alone, what starts: while it watches ctx it
// gives a queued task only to a worker free to start it at once, never to
// one that may come free later, and once it sees ctx done it hands out
// nothing more and takes back what no worker has taken. So the tasks that
// start are, in each queue, the first ones it accepted, but for those a
// busy key held back (see Order); a task given to a worker just as ctx is
// done may start just after. Either way Shutdown
// waits for the running tasks and returns once every goroutine the pool
// started has finished, as Stop does.
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
	inside := p.stopper()
	p.drainCalled.Store(true)
	// One request stops accepting and has the dispatcher watch ctx, so
	// that no queued task starts once ctx is done.
	p.request(&request{kind: drainRequest, deadline: ctx.Done()})
	// Once ctx is done, the loop looks at the deadlines, however quiet
	// it is: nothing else may wake it (a long task holds what waits).
	unwatch := context.AfterFunc(ctx, func() { p.request(&request{kind: deadlineRequest}) })
	defer unwatch()
	p.waitStopped(inside)
	if !p.dropped {
		return nil, nil
	}
	err := ctx.Err()
	if err == nil {
		err = ErrStopped
	}
	return p.claimAbandoned(), err
}
