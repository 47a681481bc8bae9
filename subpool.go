package workerpool

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// A Subpool is a kind of work on a [Pool]: mail, downloads, one tenant's
// jobs. Its tasks run on the pool's workers, at most its limit of them at
// once, and all the pool's tasks together at most the pool's maximum.
// Create one with [Pool.Subpool]; its methods are safe for concurrent use.
//
// The pool serves its own queue and each sub-pool's in turn: when a worker
// comes free and several of them hold a task that may start, they take
// turns, round robin, so that a flood of one kind of work cannot starve the
// others. A sub-pool at its limit is skipped until one of its tasks ends.
// Within a sub-pool, tasks are handed out in the order it accepted them.
//
// The pool's [WithMaxWaiting] bounds all waiting tasks together, a
// sub-pool's included, and its overflow policy applies to them. A sub-pool
// task held back by its limit, or by its key, counts as waiting. [Pool.Pause]
// holds every sub-pool, and the pool's Stop, StopWait and Shutdown cover
// them all. A sub-pool holds no memory for tasks while it has none, and
// once stopped and dropped, nothing of it is left.
type Subpool struct {
	p    *Pool
	name string
	lane *lane // its queue in the scheduler; owned by the dispatcher

	stats   subStats
	timings taskTimings // with WithTaskTimings

	// Submitters hold gate for reading while they submit. Stop and
	// StopWait close stopping, which releases the submitters waiting for
	// room, then set closed holding gate for writing, so that when they
	// send their request no submission to the sub-pool is on its way.
	gate     sync.RWMutex
	closed   atomic.Bool
	stopping chan struct{}
	once     sync.Once

	// lastEnded is closed once the pool has stopped and no task of the
	// sub-pool runs: a Stop or StopWait that the pool's stop overtook
	// waits for it, made by the first of them (see waitLastEnded).
	lastEnded       atomic.Pointer[chan struct{}]
	lastEndedClosed atomic.Bool
}

// Subpool returns a new sub-pool of p called name, whose tasks run on p's
// workers, at most limit of them at once. name is only a label, for the
// caller's use (see [Subpool.Name]); sub-pools may share one. On a stopped
// pool, the sub-pool's submissions return [ErrStopped].
//
// The pool hands tasks out ahead of its workers, to a small buffer, in the
// order of the queues' turns. When a task comes to a sub-pool with none
// waiting, the tasks in the buffer that no worker has taken come back, and
// it goes after one turn of each queue already waiting: behind the tasks
// workers had taken by then, at most one each and those they take in the
// moment before the pool sees it (see the package doc's Order). A sub-pool
// with no task waiting costs the pool nothing.
//
// Subpool panics if limit < 1.
func (p *Pool) Subpool(name string, limit int) *Subpool {
	if limit < 1 {
		panic(fmt.Sprintf("workerpool: Subpool(%q, %d): the limit must be at least 1", name, limit))
	}
	s := &Subpool{p: p, name: name, stopping: make(chan struct{})}
	s.stats.limit.Store(int64(limit))
	s.lane = &lane{owner: s, limit: limit}
	p.subpools.mu.Lock()
	p.subpools.list = append(p.subpools.list, s)
	p.subpools.mu.Unlock()
	return s
}

// subStats are a sub-pool's counters, for its Status. The dispatcher
// writes the first group; the others are added to by submitters and
// workers.
type subStats struct {
	state       atomic.Int32
	limit       atomic.Int64
	submitted   atomic.Uint64 // tasks the dispatcher accepted
	abandoned   atomic.Uint64 // dropped by a stop
	peakWaiting atomic.Int64
	// inHand counts the tasks in the sub-pool's lane and those handed out
	// of it, less those taken back (see publishLane): those no worker has
	// started are waiting.
	inHand atomic.Uint64

	_ [cacheLine]byte

	started, ended atomic.Uint64 // tasks workers started and ended
	skipped        atomic.Uint64 // tasks workers received and did not run: their submitters gave up on them
	canceled       atomic.Uint64 // tasks their submitters gave up on
	panicked       atomic.Uint64
	rejected       atomic.Uint64
}

// waiting returns the sub-pool's tasks waiting: those in its lane, and
// those handed out of it that no worker has started or skipped. A task that
// a worker is taking, between its receive and its start, still counts, so
// the sum may pass the pool's bound for that moment: it is held to it.
// Reading inHand first can only make the sum smaller.
func (s *Subpool) waiting() int {
	st := &s.stats
	n := int(st.inHand.Load()) - int(st.started.Load()) - int(st.skipped.Load())
	if bound := s.p.cfg.maxWaiting; bound > 0 {
		n = min(n, bound)
	}
	return max(n, 0)
}

// notePeak records the sub-pool's waiting tasks as its PeakWaiting if they
// are more. Status raises the peak too, to the Waiting it reports.
func (s *Subpool) notePeak() { raise(&s.stats.peakWaiting, int64(s.waiting())) }

func (s *Subpool) target() (*Pool, *Subpool) { return s.p, s }

// Subpools returns the pool's sub-pools that have not been stopped, in the
// order they were made: a metrics exporter lists them at each scrape. A
// sub-pool leaves the list once its Stop or StopWait has returned, so
// that a program that makes sub-pools as it goes does not keep them all;
// the pool's own counts still include their tasks.
func (p *Pool) Subpools() []*Subpool {
	p.subpools.mu.Lock()
	defer p.subpools.mu.Unlock()
	return slices.Clone(p.subpools.list)
}

// Name returns the name given to [Pool.Subpool].
func (s *Subpool) Name() string { return s.name }

// Submit is [Pool.Submit] for the sub-pool: the task runs on the pool's
// workers, within the sub-pool's limit, when its turn comes. It returns
// [ErrStopped] once the sub-pool or the pool is stopping.
func (s *Subpool) Submit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return s.p.submitTo(s, nil, message{task: task{fn: fn}}, s.p.cfg.overflow)
}

// SubmitCtx is [Pool.SubmitCtx] for the sub-pool. It panics if ctx is nil.
func (s *Subpool) SubmitCtx(ctx context.Context, task func()) error {
	mustContext("Subpool.SubmitCtx", ctx)
	return s.p.submitCtx(s, ctx, task)
}

// TrySubmit is [Pool.TrySubmit] for the sub-pool.
func (s *Subpool) TrySubmit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return s.p.submitTo(s, nil, message{task: task{fn: fn}}, Reject)
}

// SubmitWait is [Pool.SubmitWait] for the sub-pool.
func (s *Subpool) SubmitWait(task func()) error { return s.p.submitWait(s, task) }

// SubmitKey is [Pool.SubmitKey] for the sub-pool: tasks submitted to the
// sub-pool with the same key never run at once and start in the order they
// were submitted. Keys are the sub-pool's own: a task with the same key on
// the pool or on another sub-pool is another key's.
//
// A sub-pool's task never runs in its submitter: under [CallerRuns], its
// submissions wait for room in a full queue, as under [Block], so that no
// task runs beside the sub-pool's limit.
func (s *Subpool) SubmitKey(key string, task func()) error { return s.p.submitKey(s, key, task) }

// Group returns a new group of tasks that run on the sub-pool, as
// [Pool.Group] does for the pool. It panics if ctx is nil.
func (s *Subpool) Group(ctx context.Context) *Group {
	mustContext("Subpool.Group", ctx)
	return newGroup(s, ctx).watch()
}

// Stop stops the sub-pool: it accepts no more tasks, drops the tasks still
// waiting in it, and returns once its running tasks have finished, whatever the
// rest of the pool is doing: the pool and its other sub-pools go on, and Stop
// waits for none of their tasks, also while the pool itself stops. Of its
// tasks, those that started are the earliest it accepted, but for those a busy
// key held back, whatever workers take meanwhile. The first call returns the
// dropped fire-and-forget tasks, keyed or not, in the order the sub-pool
// accepted them: the rest. Later calls return nil. Dropped [Subpool.SubmitWait]
// tasks are not returned: their callers get [ErrStopped]. After the pool's
// Stop, Stop drops nothing: the pool's stop did.
//
// Calling Stop or StopWait from inside a task of the sub-pool deadlocks:
// the task waits for the sub-pool, and the sub-pool for the task; and so
// do calls in a cycle (a task of s stops t while a task of t stops s). A
// task of the pool or of another sub-pool may call them: it waits, and
// counts against the pool's maximum meanwhile, as in SubmitWait. If a task
// of the sub-pool waits in the pool's Stop, StopWait or Shutdown, they
// return once that task has ended, after the pool has stopped. To tell
// the pool's workers from other callers, they read their caller's stack
// trace: a few microseconds.
func (s *Subpool) Stop() []func() { return s.stop(subStopRequest) }

// StopWait stops the sub-pool gracefully: it accepts no more tasks, and
// returns once every task it accepted has run. The pool and its other
// sub-pools go on. A [Subpool.Stop] meanwhile drops the tasks left.
func (s *Subpool) StopWait() { s.stop(subDrainRequest) }

// stop closes the sub-pool to submissions and sends the dispatcher a request
// of kind, subStopRequest or subDrainRequest, then waits for it to take
// effect: for the sub-pool to have no task waiting or running.
func (s *Subpool) stop(kind requestKind) []func() {
	s.once.Do(func() {
		close(s.stopping)
		s.gate.Lock()
		s.closed.Store(true)
		s.gate.Unlock()
	})
	defer s.p.forget(s)
	r := &request{kind: kind, sub: s, done: make(chan struct{})}
	if stack := ownStack(); s.p.onWorker(stack) {
		r.worker, r.leaving = true, leaving(stack) // the pool's stop does not wait for it
	}
	if s.p.request(r) {
		select {
		case <-r.done:
			return r.tasks
		case <-s.p.done:
		}
	}
	// The pool has stopped first: what of the sub-pool still runs are
	// tasks that called the pool's Stop, StopWait or Shutdown, which end
	// once their calls return.
	s.waitLastEnded()
	s.stats.state.Store(int32(Stopped))
	return r.tasks // written, if at all, before the pool stopped
}

// waitLastEnded waits, once the pool has stopped, until no task of s
// runs. No task starts any more, so the count of those running only falls.
func (s *Subpool) waitLastEnded() {
	ch := make(chan struct{})
	if !s.lastEnded.CompareAndSwap(nil, &ch) {
		ch = *s.lastEnded.Load()
	}
	if s.stats.started.Load() == s.stats.ended.Load() {
		return // the last to end may have looked before ended was made
	}
	<-ch
}

// noteLastEnded closes lastEnded, if a stop waits for it, once no task of
// s runs: a worker that ends one of its tasks calls it once the pool has
// stopped.
func (s *Subpool) noteLastEnded() {
	if s.stats.started.Load() != s.stats.ended.Load() {
		return
	}
	if ch := s.lastEnded.Load(); ch != nil && s.lastEndedClosed.CompareAndSwap(false, true) {
		close(*ch)
	}
}

// forget takes s off the pool's list of sub-pools.
func (p *Pool) forget(s *Subpool) {
	p.subpools.mu.Lock()
	defer p.subpools.mu.Unlock()
	p.subpools.list = slices.DeleteFunc(p.subpools.list, func(x *Subpool) bool { return x == s })
}

// Resize sets the sub-pool's limit to n and returns once the pool applies
// it. Raising it starts its waiting tasks at once, unless the pool is
// paused; lowering it lets its running tasks finish, and starts no more of
// them until fewer than n run.
//
// Resize panics if n < 1.
func (s *Subpool) Resize(n int) {
	if n < 1 {
		panic(fmt.Sprintf("workerpool: Subpool.Resize(%d): the limit must be at least 1", n))
	}
	r := &request{kind: subResizeRequest, sub: s, n: n, done: make(chan struct{})}
	if s.p.request(r) {
		<-r.done
	}
}

// Status returns a snapshot of the sub-pool's own tasks: Submitted,
// Completed, Panicked, Rejected, Abandoned, Canceled, Busy (its tasks running),
// Waiting (held back by its turn, its limit or a key, or by a pause) and
// PeakWaiting, with MaxWorkers its limit and State its stage (or the
// pool's, while it is running). The fields about workers are zero: a
// sub-pool's tasks run on the pool's workers, which [Pool.Status] counts.
// As there, each field is read on its own, in an order that keeps each
// part within its whole: Panicked <= Completed <= Submitted, Busy <=
// MaxWorkers (unless a Resize lowered it while more ran), and Waiting <=
// PeakWaiting <= the pool's bound.
func (s *Subpool) Status() Status {
	st := &s.stats
	// Workers count a task ended before panicked, and the dispatcher
	// counts it submitted before it starts: reading the parts first keeps
	// them within their wholes. Busy is a difference: reading the amount
	// subtracted last can only make it smaller.
	panicked := st.panicked.Load()
	completed := st.ended.Load()
	submitted := st.submitted.Load()
	waiting := s.waiting()
	started := st.started.Load()
	abandoned := st.abandoned.Load()
	canceled := st.canceled.Load()
	ended := st.ended.Load()
	state := State(st.state.Load())
	if state == Running {
		state = State(s.p.stats.state.Load())
	}
	return Status{
		State:       state,
		MaxWorkers:  int(st.limit.Load()),
		Busy:        max(int(started)-int(ended), 0),
		Waiting:     waiting,
		PeakWaiting: int(raise(&st.peakWaiting, int64(waiting))),
		Submitted:   submitted,
		Completed:   completed,
		Panicked:    panicked,
		Rejected:    st.rejected.Load(),
		Abandoned:   abandoned,
		Canceled:    canceled,
		Timed:       s.p.cfg.timings,
		Wait:        s.timings.wait.snapshot(),
		Run:         s.timings.run.snapshot(),
	}
}
