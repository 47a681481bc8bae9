package workerpool

import (
	"context"
	"fmt"
	"slices"
	"time"
	"weak"

	"github.com/dispatchkit/workerpool/internal/sched"
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
// them all. Once stopped and dropped, nothing of a sub-pool is left.
type Subpool struct {
	p    *Pool
	name string
	lane *lane
}

// Subpool returns p's sub-pool called name: the one p has, if it has one
// of that name that is not stopping, else a new one whose tasks run on p's
// workers, at most limit of them at once, configured by opts. So a
// tenant's sub-pool is found by its name, and two sub-pools running at
// once never share one. limit and opts apply only to a sub-pool Subpool
// makes: [Subpool.Resize] changes the limit. Once a sub-pool's Stop or
// StopWait is called, its name is free for a new one. On a stopped pool,
// the sub-pool's submissions return [ErrStopped]. A sub-pool with no task
// waiting costs the pool nothing.
//
// Subpool panics if limit < 1, or on an impossible option.
func (p *Pool) Subpool(name string, limit int, opts ...SubpoolOption) *Subpool {
	if limit < 1 {
		panic(fmt.Sprintf("workerpool: Subpool(%q, %d): the limit must be at least 1", name, limit))
	}
	cfg := subpoolConfig{weight: 1}
	for _, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("workerpool: Subpool(%q, %d): nil option", name, limit))
		}
		opt(&cfg)
	}
	if cfg.weight < 1 || cfg.weight > MaxWeight {
		panic(fmt.Sprintf("workerpool: Subpool(%q, %d): WithWeight(%d) is outside 1..MaxWeight", name, limit, cfg.weight))
	}
	p.subpools.mu.Lock()
	defer p.subpools.mu.Unlock()
	if s := p.subpools.byName[name]; s != nil {
		return s
	}
	s := &Subpool{p: p, name: name}
	s.lane = &lane{sub: weak.Make(s), name: name, stopping: make(chan struct{})}
	s.lane.queue = sched.NewQueue[waiter](s.lane, limit)
	s.lane.queue.SetWeight(cfg.weight)
	s.lane.stats.limit.Store(int64(limit))
	p.subpools.list = append(p.subpools.list, s)
	if p.subpools.byName == nil {
		p.subpools.byName = make(map[string]*Subpool)
	}
	p.subpools.byName[name] = s
	return s
}

// A SubpoolOption configures a [Subpool]; pass options to [Pool.Subpool].
type SubpoolOption func(*subpoolConfig)

type subpoolConfig struct {
	weight int
}

// MaxWeight is the highest weight of a sub-pool.
const MaxWeight = sched.MaxWeight

// WithWeight gives the sub-pool w turns for each turn of a queue of weight
// 1 (the pool's own, and every sub-pool made without it): when several
// queues hold tasks that may start, they take turns in proportion to their
// weights, each round interleaved by the weights (a stride scheduler:
// within one task of its share at the end of every round). A sub-pool at its limit, or that a rate holds back, is passed
// over and keeps its turn, as with weight 1. w must be 1 (the default) to
// [MaxWeight].
func WithWeight(w int) SubpoolOption {
	return func(c *subpoolConfig) { c.weight = w }
}

func (s *Subpool) target() (*state, *lane) { return s.p.s, s.lane }
func (s *Subpool) priority() int32         { return 0 }

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
	st := s.p.s
	return st.submitTo(s.lane, nil, message{task: task{Fn: fn}}, st.cfg.overflow)
}

// SubmitContext is [Pool.SubmitContext] for the sub-pool. It panics if ctx
// is nil.
func (s *Subpool) SubmitContext(ctx context.Context, task func()) error {
	mustContext("Subpool.SubmitContext", ctx)
	return s.p.s.submitContext(s.lane, 0, ctx, task)
}

// SubmitCtx is [Subpool.SubmitContext], under the name it had first.
//
// Deprecated: use SubmitContext. SubmitCtx goes before 1.0.
func (s *Subpool) SubmitCtx(ctx context.Context, task func()) error {
	return s.SubmitContext(ctx, task)
}

// TrySubmit is [Pool.TrySubmit] for the sub-pool.
func (s *Subpool) TrySubmit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return s.p.s.submitTo(s.lane, nil, message{task: task{Fn: fn}}, Reject)
}

// SubmitWait is [Pool.SubmitWait] for the sub-pool.
func (s *Subpool) SubmitWait(task func()) error { return s.p.s.submitWait(s.lane, 0, task) }

// SubmitKey is [Pool.SubmitKey] for the sub-pool: tasks submitted to the
// sub-pool with the same key never run at once and start in the order they
// were submitted. Keys are the sub-pool's own: a task with the same key on
// the pool or on another sub-pool is another key's.
//
// A sub-pool's task never runs in its submitter: under [CallerRuns], its
// submissions wait for room in a full queue, as under [Block], so that no
// task runs beside the sub-pool's limit.
func (s *Subpool) SubmitKey(key string, task func()) error {
	return s.p.s.submitKey(s.lane, 0, key, task)
}

// Group returns a new group of tasks that run on the sub-pool, as
// [Pool.Group] does for the pool. It panics if ctx is nil.
func (s *Subpool) Group(ctx context.Context) *Group {
	mustContext("Subpool.Group", ctx)
	return newGroup(s, ctx).watch()
}

// Stop stops the sub-pool: it accepts no more tasks, drops the tasks still
// waiting in it, and returns once its running tasks have finished,
// whatever the rest of the pool is doing: the pool and its other sub-pools
// go on, and Stop waits for none of their tasks, also while the pool
// itself stops. Of its tasks, those that started are the earliest it
// accepted, but for those a busy key held back. The first call returns the
// dropped fire-and-forget tasks, keyed or not, in the order the sub-pool
// accepted them; later calls return nil. Dropped [Subpool.SubmitWait]
// tasks are not returned: their callers get [ErrStopped]. After the pool's
// Stop, Stop drops nothing: the pool's stop did.
//
// Called from a task of the pool, Stop lends that task's place while it
// waits, as the pool's Stop does: another task may run in it. It does not
// wait for the task that calls it, if that is one of the sub-pool's own,
// nor for tasks whose workers wait in the pool's Stop, StopWait or
// Shutdown. Calls in a cycle (a task of s stops t while a task of t stops
// s) deadlock. To tell the pool's workers from other callers, it reads its
// caller's stack trace: a few microseconds.
func (s *Subpool) Stop() []func() { return s.stop(subStopRequest) }

// StopWait stops the sub-pool gracefully: it accepts no more tasks, and
// returns once every task it accepted has run. The pool and its other
// sub-pools go on. A [Subpool.Stop] meanwhile drops the tasks left.
func (s *Subpool) StopWait() { s.stop(subDrainRequest) }

// stop closes the sub-pool to submissions and sends the loop a request of
// kind, subStopRequest or subDrainRequest, then waits for it to take
// effect: for the sub-pool to have no task waiting or running.
func (s *Subpool) stop(kind requestKind) []func() {
	l, st := s.lane, s.p.s
	l.once.Do(func() {
		s.p.freeName(s)
		close(l.stopping)
		l.gate.Lock()
		l.closed.Store(true)
		l.gate.Unlock()
	})
	defer s.p.forget(s)
	lent := st.lend()
	defer st.reclaim(lent)
	r := &request{kind: kind, lane: l, caller: lent.caller, done: make(chan struct{})}
	if st.request(r) {
		select {
		case <-r.done:
			return r.tasks
		case <-st.done:
		}
	}
	// The pool has stopped first: what of the sub-pool still runs are
	// tasks whose workers wait on the pool, in its Stop, StopWait or
	// Shutdown, which end once their calls return; and the caller's own,
	// if it is one.
	asking := uint64(0)
	if lent.lentLane == l || st.ownTaskLane(lent.caller) == l {
		asking = 1
	}
	waitLastEnded(l, asking)
	l.stats.state.Store(int32(Stopped))
	return r.tasks // written, if at all, before the pool stopped
}

// ownTaskLane returns the lane of the task that caller, one of the pool's
// workers, runs (nil for the pool's own queue, or for a caller that is not
// a worker): for a stop the loop did not answer, as the pool had stopped.
// Only the worker's own goroutine may call it: it reads the worker's task.
func (s *state) ownTaskLane(c caller) *lane {
	if w := s.crew.find(c.id); w != nil && w.current != nil {
		return s.laneOf(w.current)
	}
	return nil
}

// waitLastEnded waits, once the pool has stopped, until no task of lane l
// runs but asking (the caller's): no task starts any more, so the count of
// those running only falls. It polls, as a rare wait may: only tasks whose
// workers wait on the pool can still run.
func waitLastEnded(l *lane, asking uint64) {
	for wait := time.Millisecond; l.stats.started.Load()-l.stats.ended.Load() > asking; wait = min(2*wait, 100*time.Millisecond) {
		time.Sleep(wait)
	}
}

// freeName lets a new sub-pool take s's name: s is stopping.
func (p *Pool) freeName(s *Subpool) {
	p.subpools.mu.Lock()
	defer p.subpools.mu.Unlock()
	if p.subpools.byName[s.name] == s {
		delete(p.subpools.byName, s.name)
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
	r := &request{kind: subResizeRequest, lane: s.lane, n: n, done: make(chan struct{})}
	if s.p.s.request(r) {
		<-r.done
	}
}

// Status returns a snapshot of the sub-pool's own tasks: Submitted,
// Completed, Panicked, Rejected, Abandoned, Canceled, Busy (its tasks
// running), Waiting (held back by its turn, its limit or a key, or by a
// pause) and PeakWaiting, with MaxWorkers its limit and State its stage
// (or the pool's, while it is running). The fields about workers are zero:
// a sub-pool's tasks run on the pool's workers, which [Pool.Status]
// counts. As there, each field is read on its own, in an order that keeps
// each part within its whole: Panicked <= Completed <= Submitted, Busy <=
// MaxWorkers (unless a Resize lowered it while more ran), and Waiting <=
// PeakWaiting <= the pool's bound.
func (s *Subpool) Status() Status {
	l, st := s.lane, &s.lane.stats
	// Workers count a task ended before panicked, and the loop counts it
	// submitted before it starts: reading the parts first keeps them
	// within their wholes. Busy is a difference: reading the amount
	// subtracted last can only make it smaller.
	panicked := st.panicked.Load()
	completed := st.ended.Load()
	submitted := st.submitted.Load()
	waiting := l.waiting(s.p.s.cfg.maxWaiting)
	started := st.started.Load()
	abandoned := st.abandoned.Load()
	canceled := st.canceled.Load()
	ended := st.ended.Load()
	state := State(st.state.Load())
	if state == Running {
		state = State(s.p.s.stats.state.Load())
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
		Paced:       min(int(st.paced.Load()), waiting),
		Timed:       s.p.s.cfg.timings,
		Wait:        l.timings.wait.snapshot(),
		Run:         l.timings.run.snapshot(),
		LevelWait:   l.timings.levels.snapshot(),
	}
}

// errStopped returns the error of a submission to the lane's sub-pool
// once it is stopping: ErrStopped, naming the sub-pool.
func (l *lane) errStopped() error { return subpoolStopped{l.name} }

// A subpoolStopped is ErrStopped for a sub-pool stopped alone: its message
// names the sub-pool, and errors.Is finds ErrStopped in it.
type subpoolStopped struct{ name string }

func (e subpoolStopped) Error() string {
	return fmt.Sprintf("workerpool: sub-pool %q is stopped", e.name)
}
func (e subpoolStopped) Is(target error) bool { return target == ErrStopped }
