package workerpool

import "context"

// mapWindow is how many items per worker Map keeps in the pool at once. One
// would leave a worker idle for a round trip through Map's goroutine after
// each item; two keep the next item queued behind every running one.
const mapWindow = 2

// Map calls fn on every item on s's workers and returns the results in the
// order of items. fn gets a context that is cancelled when an item fails
// (returns an error or panics) or when ctx is done.
//
// Map fails fast: the first failure costs every result. To keep every
// result and every error, one pair per item, range over [MapSeq] instead.
//
// Map feeds items to the pool rather than submitting them all at once: it
// keeps at most twice as many items submitted and not yet finished as s
// may run at once when Map is called (the pool's [Pool.Size], or the
// sub-pool's limit), so that a long slice neither fills the waiting queue
// nor holds up other work on a shared pool. It waits for room
// in a bounded queue whatever the pool's overflow policy, so that it cannot
// fail with [ErrQueueFull] nor run items in the caller. The items are
// handed to workers in order.
//
// After the first failure Map hands out no more items; those already
// submitted but not started are skipped, those running finish. Map then
// returns nil and the first error: fn's error, a [*PanicError] if fn
// panicked, [ErrStopped] if the pool was stopped before every item had run,
// or ctx's cause if ctx was done first. With no failure it returns every
// result and a nil error. fn never runs after Map has returned, and
// everything it did happens before Map returns.
//
// Map of an empty slice returns an empty slice and nil at once. A nil fn
// makes Map return [ErrNilTask], and a nil ctx or s makes it panic, even
// for an empty slice. Map waits for its items as [Pool.SubmitWait] does,
// so calling it from inside a task of the same pool can deadlock.
//
// Map allocates 9 objects per call, however many items there are: among
// them the results and one slice of 40-byte task records, one per item.
func Map[T, R any](ctx context.Context, s Submitter, items []T, fn func(context.Context, T) (R, error)) ([]R, error) {
	mustContext("Map", ctx)
	mustTarget("Map", s)
	if fn == nil {
		return nil, ErrNilTask
	}
	if len(items) == 0 {
		return []R{}, nil
	}
	g := newGroup(s, ctx)
	m := &mapRun[T, R]{
		g:       g,
		items:   items,
		fn:      fn,
		results: make([]R, len(items)),
		room:    make(chan struct{}, min(len(items), mapWindow*window(s))),
	}
	// One slice of task records for every item: the pool holds pointers
	// into it, so items cost no allocation each.
	tasks := make([]mapTask[T, R], len(items))
	m.tasks = tasks
	g.items = m // to give up on the items not started once ctx is done
	for i := range items {
		select {
		case m.room <- struct{}{}:
			// Fewer than the window's items are in the pool.
		case <-g.ctx.Done():
			// An item failed, ctx is done or the pool refused an item.
		}
		if g.ctx.Err() != nil {
			// Hand out no more items. Unless an item failed first, the
			// items left out did not succeed because ctx was done: record
			// its cause, as a skipped item would.
			g.fail(context.Cause(g.ctx))
			break
		}
		tasks[i] = mapTask[T, R]{m: m, i: i}
		// Block whatever the pool's policy; a refusal (ErrStopped) or the
		// group's context ending the wait is recorded by start.
		g.start(&tasks[i], Block, false)
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return m.results, nil
}

// A mapRun is the state one Map call shares among its items.
type mapRun[T, R any] struct {
	g       *Group
	items   []T
	fn      func(context.Context, T) (R, error)
	results []R // each written by its own item's task, before Wait returns
	tasks   []mapTask[T, R]
	// room holds a token for every item submitted and not yet finished;
	// its capacity is the window.
	room chan struct{}
}

func (m *mapRun[T, R]) item(i int) cancelable { return &m.tasks[i] }

// A mapTask is the waiter of one item: 40 bytes, in Map's slice.
type mapTask[T, R any] struct {
	takeState
	where queueSpot
	m     *mapRun[T, R]
	i     int
}

func (t *mapTask[T, R]) spot() *queueSpot { return &t.where }

// take is waiter.take: see Group.take.
func (t *mapTask[T, R]) take() bool { return t.m.g.take(&t.takeState, t) }

// do calls fn on the item.
func (t *mapTask[T, R]) do(*locals) error {
	m := t.m
	r, err := m.fn(m.g.ctx, m.items[t.i])
	if err != nil {
		m.g.fail(err)
		return nil
	}
	m.results[t.i] = r
	return nil
}

// finish frees the item's place in the window, then accounts for it.
func (t *mapTask[T, R]) finish(err error) {
	<-t.m.room
	if err == ErrStopped { // dropped by Stop before it began
		t.m.g.dropped()
		return
	}
	t.m.g.ended(err)
}

// window returns how many of s's tasks may run at once: the pool's maximum
// or the sub-pool's limit.
func window(s Submitter) int {
	st, l := s.target()
	if l != nil {
		return int(l.stats.limit.Load())
	}
	return int(st.stats.maxWorkers.Load())
}
