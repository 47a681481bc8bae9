package workerpool

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
)

// A MapSeqOption configures one [MapSeq] call.
type MapSeqOption func(*mapSeqConfig)

type mapSeqConfig struct {
	window int // 0: the default, twice what s may run at once
}

// WithWindow sets how many items [MapSeq] keeps submitted and not yet
// yielded: n of them at most run or wait in the pool, or wait, ended, for
// the loop to take their pairs. A larger window keeps the workers busy
// behind a slow item or a slow loop, and holds as many results. The
// default is twice what the pool may run at once when the loop begins
// ([Pool.Size], or the sub-pool's limit). WithWindow panics if n < 1.
func WithWindow(n int) MapSeqOption {
	if n < 1 {
		panic(fmt.Sprintf("workerpool: MapSeq: window %d < 1", n))
	}
	return func(c *mapSeqConfig) { c.window = n }
}

// MapSeq calls fn on every item on s's workers and returns an iterator
// over the results: one pair per item, in the order of items, each yielded
// as soon as its item and every earlier one have ended. Unlike [Map], which
// stops at the first failure, MapSeq keeps every result and every error:
// an item whose fn returns an error, or panics (a [*PanicError]), yields
// that error as its pair, and the other items go on. An fn that calls
// [runtime.Goexit] yields the zero R and a nil error, as [Future.Wait]
// does.
//
// MapSeq feeds the pool as the loop takes pairs: at most a window of items
// are submitted and not yet yielded, so a long slice neither fills the
// waiting queue nor holds up other work on a shared pool, and a slow loop
// holds back the pool rather than piling up results. The window is twice
// what s may run at once when the loop begins ([Pool.Size], or the
// sub-pool's limit), or what [WithWindow] sets. Items run on workers,
// never in the caller: MapSeq waits for room in a bounded queue whatever
// the overflow policy, so it neither fails with [ErrQueueFull] nor runs an
// item itself. The items are handed to workers in order.
//
// When the loop ends early (break, return, a panic or [runtime.Goexit] in
// its body), or ctx is done, the rest is cancelled: no item starts after
// that, those waiting in the pool's queue leave it at once ([Pool.Status]
// counts them in Canceled), and the context passed to fn is cancelled.
// Once ctx is done the pairs go on, so that each item still has its own:
// an item that ran yields fn's result, one that did not yields
// [context.Cause] of ctx, at once. The loop returns only once every fn
// that started has returned: nothing MapSeq started runs after the loop,
// and everything fn did happens before its pair is yielded.
//
// If the pool (or the sub-pool) is stopped, or stops while the loop runs,
// each item it did not run yields [ErrStopped]: on a stopped pool, every
// item does. A nil fn makes every item yield [ErrNilTask]. So a loop that
// runs to its end sees exactly len(items) pairs; an empty slice yields
// none.
//
// The iterator is single use: MapSeq submits nothing until the loop
// begins, and ranging over it a second time panics (call MapSeq again to
// run fn again), so that a second loop does not pass silently for an
// empty batch. A nil ctx or s makes MapSeq panic at once. MapSeq waits for
// its items as [Pool.SubmitWait] does, so a loop inside a task of the same
// pool can deadlock.
//
// A call and its loop allocate 9 objects, 12 if ctx can be done,
// however many items there are: among them one slice of task records, 56
// bytes an item on 64-bit machines, made for every item as the loop
// begins (so its memory follows the slice, not the window, even for a
// loop that ends early), and the window's pairs. Ending early costs a few
// more.
func MapSeq[T, R any](ctx context.Context, s Submitter, items []T, fn func(context.Context, T) (R, error), opts ...MapSeqOption) iter.Seq2[R, error] {
	mustContext("MapSeq", ctx)
	mustTarget("MapSeq", s)
	m := &seqRun[T, R]{s: s, parent: ctx, items: items, fn: fn}
	for _, o := range opts {
		o(&m.cfg)
	}
	return m.all
}

// all is the iterator MapSeq returns.
func (m *seqRun[T, R]) all(yield func(R, error) bool) {
	if m.ranged.Swap(true) {
		panic("workerpool: MapSeq: the iterator was ranged over twice; call MapSeq again to run fn again")
	}
	if len(m.items) == 0 {
		return
	}
	w := m.cfg.window
	if w == 0 {
		w = mapWindow * window(m.s)
	}
	m.st, _ = m.s.target()
	m.tasks = make([]seqTask[T, R], len(m.items))
	m.slots = make([]seqSlot[R], min(w, len(m.items)))
	m.ended = make(chan int, len(m.slots))
	m.ctx, m.cancel = context.WithCancel(m.parent)
	defer m.cancel()
	if m.parent.Done() != nil {
		// Give up on the queued items as soon as ctx is done, even while
		// the loop's body runs.
		defer context.AfterFunc(m.parent, m.close)()
	}
	m.run(yield)
}

// A seqRun is the state of one MapSeq loop.
//
// Item i's pair is kept in slots[i%len(slots)] from its submission until
// it is yielded: the window keeps items first <= i < next, and next-first
// <= len(slots), so no two of them share a slot. The loop's goroutine
// submits items and yields pairs; a worker (or the dispatcher, dropping an
// item) writes an item's val and err, then sends its index on ended; the
// close that ctx's end sets off may run on another goroutine.
type seqRun[T, R any] struct {
	cfg    mapSeqConfig
	ranged atomic.Bool // the loop has begun

	s      Submitter
	st     *state
	parent context.Context // MapSeq's ctx
	ctx    context.Context // fn's: parent, cancelled too when the loop ends
	cancel context.CancelFunc
	items  []T
	fn     func(context.Context, T) (R, error)
	tasks  []seqTask[T, R]
	slots  []seqSlot[R]

	// ended receives the index of each item the pool took, once it has
	// ended; it holds a window's items, so finish never blocks.
	ended chan int

	// The window's bounds and each slot's state, guarded by mu. close holds
	// mu while the dispatcher takes the items back, so that once any close
	// returns, the items given up are counted Canceled and marked.
	mu          sync.Mutex
	first, next int // the next item to yield, and to submit

	// closed is set, under mu, by the first close: from then on no item
	// starts. It is atomic for take, which reads it without mu: ctx's
	// AfterFunc may call close before ctx's end has reached fn's context.
	closed atomic.Bool
}

// A seqSlot holds one item's pair.
type seqSlot[R any] struct {
	val   R
	err   error
	state slotState // guarded by seqRun.mu
}

type slotState uint8

const (
	slotFree       slotState = iota
	slotSubmitting           // being submitted
	slotInPool               // accepted; the pool runs or drops it, unless it is given up
	slotReady                // its pair is ready
)

func (m *seqRun[T, R]) slot(i int) *seqSlot[R] { return &m.slots[i%len(m.slots)] }

// run submits the items, a window at a time, and yields their pairs in
// order until the last, or until yield returns false.
func (m *seqRun[T, R]) run(yield func(R, error) bool) {
	n := len(m.items)
	done := m.parent.Done() // not fn's, which only the loop's end cancels
	finished := false
	defer func() {
		if !finished {
			m.endEarly()
		}
	}()
	// On a bounded queue a submission may wait for room, for as long as
	// the pool's tasks take to end: an item that has ended meanwhile would
	// wait with it. So there the loop takes the ends that came before each
	// submission, and yields the next pair first if it is ready.
	bounded := m.st.cfg.maxWaiting > 0
	for y := range n {
		for m.next < n && m.next-y < len(m.slots) {
			if bounded && m.next > y && m.takeEnded(y) {
				break
			}
			m.submit()
		}
		for !m.ready(y) {
			select {
			case i := <-m.ended:
				m.noteEnded(i)
			case <-done:
				// Give up on the items not started, then wait for the
				// others.
				m.close()
				done = nil
			}
		}
		sl := m.slot(y)
		val, err := sl.val, sl.err
		m.mu.Lock()
		*sl = seqSlot[R]{}
		m.first = y + 1
		m.mu.Unlock()
		if !yield(val, err) {
			return
		}
	}
	finished = true
}

// takeEnded takes the ends that came, without waiting, and reports
// whether item i's pair is ready.
func (m *seqRun[T, R]) takeEnded(i int) bool {
	for {
		select {
		case j := <-m.ended:
			m.noteEnded(j)
		default:
			return m.ready(i)
		}
	}
}

// noteEnded marks item i's pair ready: a worker ran it, or a stop dropped
// it, and its end came on m.ended.
func (m *seqRun[T, R]) noteEnded(i int) {
	m.mu.Lock()
	m.slot(i).state = slotReady
	m.mu.Unlock()
}

// ready reports whether item i's pair is ready.
func (m *seqRun[T, R]) ready(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.slot(i).state == slotReady
}

// submit submits item next, or sets its pair to why it cannot run.
func (m *seqRun[T, R]) submit() {
	if m.parent.Err() != nil {
		m.close() // whether or not ctx's AfterFunc has run yet
	}
	m.mu.Lock()
	i := m.next
	m.next++
	sl := m.slot(i)
	switch {
	case m.closed.Load():
		m.readyLocked(sl, m.cause())
		m.mu.Unlock()
		return
	case m.fn == nil:
		m.readyLocked(sl, ErrNilTask)
		m.mu.Unlock()
		return
	}
	sl.state = slotSubmitting
	m.mu.Unlock()

	t := &m.tasks[i]
	t.m, t.i = m, i
	// Block whatever the pool's policy: never ErrQueueFull, never in the
	// caller. Give up waiting for room once ctx is done: fn's context ends
	// later only when the loop does, and no submission is under way then.
	err := submitWaiter(m.s, m.parent, t, Block)

	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err == nil && m.closed.Load():
		// A close came while it was on its way, and did not see it.
		m.giveUpLocked([]cancelable{t})
	case err == nil:
		sl.state = slotInPool
	case err == m.parent.Err():
		m.readyLocked(sl, m.cause())
	default: // ErrStopped
		m.readyLocked(sl, err)
	}
}

// close gives up on the items in the pool that no worker has taken, once
// ctx is done or the loop has ended: they leave the queue, counted
// Canceled, and their pairs are ctx's cause. No item starts after close
// has begun.
func (m *seqRun[T, R]) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return
	}
	m.closed.Store(true)
	var ws []cancelable
	for i := m.first; i < m.next; i++ {
		if m.slot(i).state == slotInPool {
			ws = append(ws, &m.tasks[i])
		}
	}
	m.giveUpLocked(ws)
}

// giveUpLocked takes back the items of ws, in the pool, that no worker has
// taken, and marks them ready with ctx's cause; those the pool took stay
// in it (or, if not yet marked, go in it), to be waited for.
func (m *seqRun[T, R]) giveUpLocked(ws []cancelable) {
	if len(ws) > 0 {
		m.st.giveUp(m.s, ws)
	}
	for _, w := range ws {
		t := w.(*seqTask[T, R])
		sl := m.slot(t.i)
		if t.state.Load() == givenUp {
			m.readyLocked(sl, m.cause())
		} else {
			sl.state = slotInPool
		}
	}
}

// cause is the pair of an item that did not run because the loop was
// cancelled: ctx's cause, or [context.Canceled] once the loop has ended
// (that pair is never yielded).
func (m *seqRun[T, R]) cause() error {
	if err := context.Cause(m.parent); err != nil {
		return err
	}
	return context.Canceled
}

// readyLocked sets sl's pair to the zero R and err.
func (m *seqRun[T, R]) readyLocked(sl *seqSlot[R], err error) {
	var zero R
	sl.val, sl.err, sl.state = zero, err, slotReady
}

// endEarly ends a loop that stopped before the last pair: it cancels fn's
// context, gives up on the items not started, and waits for those that
// started to end.
func (m *seqRun[T, R]) endEarly() {
	m.cancel()
	m.close()
	m.mu.Lock()
	running := 0
	for i := m.first; i < m.next; i++ {
		if m.slot(i).state == slotInPool {
			running++
		}
	}
	m.mu.Unlock()
	for range running {
		<-m.ended
	}
}

// A seqTask is the waiter of one item of a MapSeq loop: 56 bytes, in the
// loop's slice.
type seqTask[T, R any] struct {
	takeState
	where queueSpot
	m     *seqRun[T, R]
	i     int
}

func (t *seqTask[T, R]) spot() *queueSpot { return &t.where }

// take is waiter.take: the pool takes the item, unless the loop gave it up
// or was cancelled (it ended, or ctx is done): then the item is given up
// here, and counted Canceled at once, as Group.take does.
func (t *seqTask[T, R]) take() bool {
	if t.m.closed.Load() || t.m.ctx.Err() != nil {
		if t.giveUp() && t.where.counted.CompareAndSwap(false, true) {
			countCanceled(t.m.s, 1)
		}
		return false
	}
	return t.takeState.take()
}

// do calls fn on the item and keeps its pair.
func (t *seqTask[T, R]) do(*locals) error {
	m := t.m
	val, err := m.fn(m.ctx, m.items[t.i])
	sl := m.slot(t.i)
	sl.val, sl.err = val, err
	return nil
}

// finish keeps why the item did not return (its *PanicError, or
// ErrStopped), then hands its index to the loop.
func (t *seqTask[T, R]) finish(err error) {
	if err != nil {
		var zero R
		sl := t.m.slot(t.i)
		sl.val, sl.err = zero, err
	}
	t.m.ended <- t.i
}
