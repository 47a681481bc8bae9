package workerpool

import (
	"container/heap"
	"slices"

	"github.com/gammazero/deque"
)

// An entry is a task as the scheduler knows it: its lane, its key's line
// (nil if it has no key) and its seq, which numbers the tasks in the order
// the pool accepted them, from 1.
type entry struct {
	task
	lane *lane
	line *keyLine
	seq  uint64
	// accepted is when the pool accepted the task, in nanoseconds since it
	// was made, plus one, if it times its tasks (WithTaskTimings); else 0.
	accepted int64
}

// mustReport reports whether the scheduler must be told when e ends: a
// keyed task frees its key, and a sub-pool's task (its lane has an owner)
// a place under its limit. Workers ask it too: it reads nothing that
// changes.
func (e *entry) mustReport() bool { return e.line != nil || e.lane.owner != nil }

// A lane is one of the scheduler's queues: the pool's own, or a sub-pool's.
// It holds the lane's waiting tasks: unkeyed ones in a fifo, keyed ones in
// the lines of their keys. Of the waiting tasks that may start, it hands out
// the one accepted first. An unkeyed task may always start; a keyed one may
// when its key is not busy: when no task of its key is running (handed to
// a worker and not yet ended). So a busy key holds back its own tasks and
// no others.
//
// A lane is plain data, owned by the scheduler.
type lane struct {
	// owner is what the lane is the queue of, for the loop: the sub-pool,
	// or nil for the pool's own lane. Set when the lane is made, it never
	// changes; the scheduler looks only at whether it is nil. It has a
	// cache line of its own: workers read it for every task they run, and
	// the loop writes the counts below for every task it hands out.
	owner any
	_     [cacheLine - 16]byte
	// limit is the most tasks of the lane that may run at once; 0 means
	// no limit of its own (the pool's lane). running counts the lane's
	// tasks handed to a worker (or on their way to one) and not yet ended.
	limit, running int

	fifo fifo // unkeyed waiting tasks
	// keys holds the line of every key with a task waiting or running, and
	// ready the lines whose first task may start, earliest first.
	keys  map[string]*keyLine
	ready lineHeap
	// mostKeys is the most keys held at once since keys was made: see
	// forget.
	mostKeys int

	waiting int // tasks waiting: in the fifo and in the lines
	held    int // of them, those in the lines of busy keys
	// handed counts the lane's tasks that the loop handed to workers, less
	// those it took back: its sub-pool's Status counts as waiting those of
	// them no worker has started.
	handed uint64
	// turn is the lane's place in the scheduler's turns while it has
	// waiting tasks; inTurns says whether it is in the turns, and asideAt
	// is 1 + its index among the lanes set aside, or 0.
	turn    int64
	inTurns bool
	asideAt int
}

// A keyLine is the line of one key's tasks in one lane. A key has a line
// only while a task with it waits or runs, so an idle key costs nothing. A
// keyed task is always a func: SubmitKey takes nothing else.
type keyLine struct {
	key      string
	lane     *lane
	fns      deque.Deque[func()] // waiting, in acceptance order
	seqs     rising              // their seqs
	accepted rising              // when the pool accepted them, if it times its tasks
	busy     bool                // a task of the key is running
	// at is the line's index in its lane's ready heap, or -1.
	at int
}

// mayStart reports whether the lane has a waiting task that may start now:
// one not held by its key, and room under its limit. A limit at or above
// the pool's maximum, max, never holds a task back: the maximum does.
func (l *lane) mayStart(max int) bool {
	return (l.fifo.len() > 0 || l.ready.Len() > 0) && l.underLimit(max)
}

// underLimit reports whether one more of the lane's tasks may run.
func (l *lane) underLimit(max int) bool {
	return l.limit == 0 || l.running < l.limit || l.limit >= max
}

// first returns the lane's waiting task that was accepted first among
// those that may start, and its key's line (nil if unkeyed). The lane must
// have one.
func (l *lane) first() entry {
	seq, unkeyed := l.fifo.frontSeq()
	if l.ready.Len() > 0 {
		line := l.ready[0]
		if q := line.seqs.first(); !unkeyed || q < seq {
			return entry{task: task{fn: line.fns.Front()}, lane: l, line: line, seq: q, accepted: int64(line.accepted.first())}
		}
	}
	return entry{task: l.fifo.front(), lane: l, seq: seq, accepted: l.fifo.firstAccepted()}
}

// remove takes e, which first returned, out of the lane.
func (l *lane) remove(e entry) {
	l.waiting--
	if e.line == nil {
		l.fifo.popFront()
		return
	}
	e.line.popFront()
	heap.Remove(&l.ready, e.line.at)
}

// push puts e, a task of the lane, behind its waiting tasks: in the fifo,
// or in its key's line.
func (l *lane) push(e entry) {
	l.waiting++
	line := e.line
	if line == nil {
		l.fifo.pushBack(e.task, e.seq, e.accepted)
		return
	}
	line.fns.PushBack(e.fn)
	line.seqs.pushBack(e.seq)
	if e.accepted != 0 {
		line.accepted.pushBack(uint64(e.accepted))
	}
	switch {
	case line.busy:
		l.held++
	case line.fns.Len() == 1:
		heap.Push(&l.ready, line)
	}
}

// pushFront puts e, a task of the lane handed out and taken back before it
// started, back in front of its waiting tasks: it was accepted before them.
// Its key is no longer busy.
func (l *lane) pushFront(e entry) {
	l.waiting++
	line := e.line
	if line == nil {
		l.fifo.pushFront(e.task, e.seq, e.accepted)
		return
	}
	line.busy = false
	l.held -= line.fns.Len()
	line.fns.PushFront(e.fn)
	line.seqs.pushFront(e.seq)
	if e.accepted != 0 {
		line.accepted.pushFront(uint64(e.accepted))
	}
	if line.at >= 0 {
		heap.Fix(&l.ready, line.at)
	} else {
		heap.Push(&l.ready, line)
	}
}

// popFront removes the line's first task.
func (line *keyLine) popFront() {
	line.fns.PopFront()
	line.seqs.popFront()
	if line.accepted.len() > 0 {
		line.accepted.popFront()
	}
}

// line returns key's line in the lane, made if it has none; free holds
// unused lines to reuse.
func (l *lane) line(key string, free *[]*keyLine) *keyLine {
	if line := l.keys[key]; line != nil {
		return line
	}
	if l.keys == nil {
		l.keys = make(map[string]*keyLine)
	}
	var line *keyLine
	if n := len(*free); n > 0 {
		line, *free = (*free)[n-1], (*free)[:n-1]
	} else {
		line = new(keyLine)
	}
	line.key, line.lane, line.at = key, l, -1
	l.keys[key] = line
	l.mostKeys = max(l.mostKeys, len(l.keys))
	return line
}

// keyEnded frees line's key, whose running task ended or was taken back: its
// next task may start, or, with none waiting, the line goes.
func (l *lane) keyEnded(line *keyLine, free *[]*keyLine) {
	line.busy = false
	if n := line.fns.Len(); n > 0 {
		l.held -= n
		heap.Push(&l.ready, line)
		return
	}
	l.forget(line, free)
}

// maxFreeLines is how many unused key lines the scheduler keeps, so that
// keys that come and go cost no allocation: enough for a task of a
// different key on each of a hundred workers and in the hand-off buffer.
const maxFreeLines = 128

// smallKeyMap is the most keys whose map a lane keeps however few it holds,
// so that keys that come and go do not remake it.
const smallKeyMap = 64

// forget drops line, whose key has no task waiting or running, and keeps up to
// maxFreeLines lines, with their buffers, for keys to come. A map keeps the
// memory of the most keys it ever held, so once the lane holds a quarter of
// that, its keys move to a map of their present size, unless the most is
// small enough to keep (smallKeyMap).
func (l *lane) forget(line *keyLine, free *[]*keyLine) {
	delete(l.keys, line.key)
	if len(*free) < maxFreeLines {
		*line = keyLine{fns: line.fns, seqs: line.seqs.emptied(), accepted: line.accepted.emptied(), at: -1} // its buffers kept
		*free = append(*free, line)
	}
	if n := len(l.keys); n < l.mostKeys/4 && l.mostKeys > smallKeyMap {
		keys := make(map[string]*keyLine, n)
		for k, v := range l.keys {
			keys[k] = v
		}
		l.keys, l.mostKeys = keys, n
	}
}

// drain removes every waiting task of the lane and appends it to tasks, in
// no particular order. The lines of busy keys stay, empty, until
// their task ends; the others go.
func (l *lane) drain(tasks []entry, free *[]*keyLine) []entry {
	for l.fifo.len() > 0 {
		seq, _ := l.fifo.frontSeq()
		tasks = append(tasks, entry{task: l.fifo.front(), lane: l, seq: seq, accepted: l.fifo.firstAccepted()})
		l.fifo.popFront()
	}
	for _, line := range l.keys {
		for line.fns.Len() > 0 {
			tasks = append(tasks, entry{task: task{fn: line.fns.Front()}, lane: l, line: line, seq: line.seqs.first(), accepted: int64(line.accepted.first())})
			line.popFront()
		}
		line.at = -1
		if !line.busy {
			l.forget(line, free)
		}
	}
	l.ready = l.ready[:0]
	l.waiting, l.held = 0, 0
	return tasks
}

// A lineHeap orders key lines by the seq of their first waiting task: the
// ready lines of a lane, for container/heap.
type lineHeap []*keyLine

func (h lineHeap) Len() int           { return len(h) }
func (h lineHeap) Less(i, j int) bool { return h[i].seqs.first() < h[j].seqs.first() }
func (h lineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *lineHeap) Push(x any) {
	line := x.(*keyLine)
	line.at = len(*h)
	*h = append(*h, line)
}
func (h *lineHeap) Pop() any {
	old := *h
	line := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	if n := len(*h); n < cap(*h)/4 && cap(*h) > smallKeyMap {
		*h = slices.Clone(*h) // gives back the memory of a burst of keys
	}
	line.at = -1
	return line
}

// A fifo is a queue of unkeyed tasks, with their seqs. A func costs 12
// bytes in it, a waiter 28: its seq is kept apart, as a gap of 4 bytes from
// the one before (see rising).
type fifo struct {
	fns      deque.Deque[func()] // nil: the next of waiters
	waiters  deque.Deque[waiter]
	seqs     rising
	accepted rising // when the pool accepted each task, if it times its tasks: empty otherwise
}

func (f *fifo) len() int { return f.fns.Len() }

// holds reports whether the task numbered seq may be in the fifo: whether
// seq is within the seqs of its first and last tasks. The fifo holds every
// unkeyed task of its lane in that range that its submitter has not given
// up on: a lane's tasks leave it first in, first out, and come back to its
// front.
func (f *fifo) holds(seq uint64) bool {
	return f.seqs.len() > 0 && f.seqs.first() <= seq && seq <= f.seqs.last
}

// front returns the first task; the fifo must not be empty.
func (f *fifo) front() task {
	if fn := f.fns.Front(); fn != nil {
		return task{fn: fn}
	}
	return task{w: f.waiters.Front()}
}

// firstAccepted returns when the pool accepted the first task, or 0 if it
// does not time its tasks.
func (f *fifo) firstAccepted() int64 { return int64(f.accepted.first()) }

// frontSeq returns the first task's seq, and false if there is none.
func (f *fifo) frontSeq() (uint64, bool) {
	if f.seqs.len() == 0 {
		return 0, false
	}
	return f.seqs.first(), true
}

func (f *fifo) popFront() {
	if f.fns.PopFront() == nil {
		f.waiters.PopFront()
	}
	f.seqs.popFront()
	if f.accepted.len() > 0 {
		f.accepted.popFront()
	}
}

func (f *fifo) pushBack(t task, seq uint64, accepted int64) {
	f.fns.PushBack(t.fn) // nil for a waiter
	if t.w != nil {
		f.waiters.PushBack(t.w)
	}
	f.seqs.pushBack(seq)
	if accepted != 0 {
		f.accepted.pushBack(uint64(accepted))
	}
}

func (f *fifo) pushFront(t task, seq uint64, accepted int64) {
	f.fns.PushFront(t.fn)
	if t.w != nil {
		f.waiters.PushFront(t.w)
	}
	f.seqs.pushFront(seq)
	if accepted != 0 {
		f.accepted.pushFront(uint64(accepted))
	}
}

// A rising is a queue of numbers that never fall from one to the next: the
// seqs of a lane's tasks, or when they were accepted. It keeps each as its
// gap from the one before, in 4 bytes; a gap too wide for them (over four
// billion tasks, or four seconds) is kept whole, in far. So a task costs 4
// bytes however its lane's tasks and others' interleave.
type rising struct {
	gaps deque.Deque[uint32] // the first's is 0, or farGap
	far  deque.Deque[uint64] // the numbers whose gap is farGap, in order
	// head is the first number, last the last one, while there are any.
	head, last uint64
}

// farGap marks a number kept whole, in far.
const farGap = ^uint32(0)

func (r *rising) len() int { return r.gaps.Len() }

// first returns the first number, or 0 if there is none.
func (r *rising) first() uint64 {
	if r.gaps.Len() == 0 {
		return 0
	}
	return r.head
}

// pushBack adds n, at least the last number, behind the others.
func (r *rising) pushBack(n uint64) {
	switch {
	case r.gaps.Len() == 0:
		r.gaps.PushBack(0)
		r.head = n
	case n-r.last >= uint64(farGap):
		r.gaps.PushBack(farGap)
		r.far.PushBack(n)
	default:
		r.gaps.PushBack(uint32(n - r.last))
	}
	r.last = n
}

// pushFront adds n, at most the first number, in front of the others.
func (r *rising) pushFront(n uint64) {
	if r.gaps.Len() == 0 {
		r.pushBack(n)
		return
	}
	// The first number's gap, unused while it was first, is now from n.
	if g := r.gaps.Front(); g != farGap {
		if r.head-n >= uint64(farGap) {
			r.gaps.Set(0, farGap)
			r.far.PushFront(r.head)
		} else {
			r.gaps.Set(0, uint32(r.head-n))
		}
	}
	r.gaps.PushFront(0)
	r.head = n
}

// popFront removes the first number.
func (r *rising) popFront() {
	if r.gaps.PopFront() == farGap {
		r.far.PopFront()
	}
	if r.gaps.Len() == 0 {
		return
	}
	if g := r.gaps.Front(); g == farGap {
		r.head = r.far.Front()
	} else {
		r.head += uint64(g)
	}
}

// emptied returns r empty, with its buffers kept.
func (r *rising) emptied() rising {
	r.gaps.Clear()
	r.far.Clear()
	return rising{gaps: r.gaps, far: r.far}
}
