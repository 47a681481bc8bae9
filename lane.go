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
	// id is 0 for the pool's lane, and a number of its own for each
	// sub-pool's, by which the loop tells them apart.
	id int
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

	waiting int  // tasks waiting: in the fifo and in the lines
	held    int  // of them, those in the lines of busy keys
	inRing  bool // in the scheduler's ring: it has waiting tasks
}

// A keyLine is the line of one key's tasks in one lane. A key has a line
// only while a task with it waits or runs, so an idle key costs nothing.
type keyLine struct {
	key   string
	lane  *lane
	tasks deque.Deque[queued] // waiting, in acceptance order
	// accepted holds when the pool accepted each waiting task, beside
	// tasks, in nanoseconds since the pool was made, if it times its tasks.
	accepted deque.Deque[int64]
	busy     bool // a task of the key is running
	// at is the line's index in its lane's ready heap, or -1.
	at int
}

// A queued task is one waiting in a key's line, with its seq: 16 bytes. A
// keyed task is always a func: SubmitKey takes nothing else.
type queued struct {
	fn  func()
	seq uint64
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
		q := line.tasks.Front()
		if !unkeyed || q.seq < seq {
			e := entry{task: task{fn: q.fn}, lane: l, line: line, seq: q.seq}
			if line.accepted.Len() > 0 {
				e.accepted = line.accepted.Front()
			}
			return e
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
	e.line.tasks.PopFront()
	if e.accepted != 0 {
		e.line.accepted.PopFront()
	}
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
	line.tasks.PushBack(queued{e.fn, e.seq})
	if e.accepted != 0 {
		line.accepted.PushBack(e.accepted)
	}
	switch {
	case line.busy:
		l.held++
	case line.tasks.Len() == 1:
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
	l.held -= line.tasks.Len()
	line.tasks.PushFront(queued{e.fn, e.seq})
	if e.accepted != 0 {
		line.accepted.PushFront(e.accepted)
	}
	if line.at >= 0 {
		heap.Fix(&l.ready, line.at)
	} else {
		heap.Push(&l.ready, line)
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
	if n := line.tasks.Len(); n > 0 {
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
		*line = keyLine{tasks: line.tasks, accepted: line.accepted, at: -1} // empty, its buffers kept
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
		e := entry{task: l.fifo.front(), lane: l, seq: l.fifo.firstSeq(), accepted: l.fifo.firstAccepted()}
		l.fifo.popFront()
		tasks = append(tasks, e)
	}
	for _, line := range l.keys {
		for q := range line.tasks.IterPopFront() {
			e := entry{task: task{fn: q.fn}, lane: l, line: line, seq: q.seq}
			if line.accepted.Len() > 0 {
				e.accepted = line.accepted.PopFront()
			}
			tasks = append(tasks, e)
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

func (h lineHeap) Len() int { return len(h) }
func (h lineHeap) Less(i, j int) bool {
	return h[i].tasks.Front().seq < h[j].tasks.Front().seq
}
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

// A fifo is a queue of unkeyed tasks with their seqs. A func costs 8 bytes
// in it, a waiter 24: their seqs are kept apart, as runs of consecutive
// numbers, and a lane's tasks mostly come in long runs.
type fifo struct {
	fns     deque.Deque[func()] // nil: the next of waiters
	waiters deque.Deque[waiter]
	runs    deque.Deque[seqRun]
	// accepted holds when the pool accepted each task, if it times its
	// tasks, in nanoseconds since it was made: empty otherwise.
	accepted deque.Deque[int64]
}

// A seqRun is n consecutive seqs from first: those of n tasks in a row.
type seqRun struct{ first, n uint64 }

func (f *fifo) len() int { return f.fns.Len() }

// holds reports whether the task numbered seq is in the fifo: its seqs are
// in runs, in order.
func (f *fifo) holds(seq uint64) bool {
	n := f.runs.Len()
	i, j := 0, n
	for i < j { // the first run that ends after seq
		h := (i + j) / 2
		if r := f.runs.At(h); r.first+r.n <= seq {
			i = h + 1
		} else {
			j = h
		}
	}
	return i < n && f.runs.At(i).first <= seq
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
func (f *fifo) firstAccepted() int64 {
	if f.accepted.Len() == 0 {
		return 0
	}
	return f.accepted.Front()
}

// firstSeq returns the first task's seq; the fifo must not be empty.
func (f *fifo) firstSeq() uint64 { return f.runs.Front().first }

// frontSeq returns the first task's seq, and false if there is none.
func (f *fifo) frontSeq() (uint64, bool) {
	if f.runs.Len() == 0 {
		return 0, false
	}
	return f.runs.Front().first, true
}

func (f *fifo) popFront() {
	if f.fns.PopFront() == nil {
		f.waiters.PopFront()
	}
	if f.accepted.Len() > 0 {
		f.accepted.PopFront()
	}
	r := f.runs.Front()
	if r.n == 1 {
		f.runs.PopFront()
	} else {
		f.runs.Set(0, seqRun{r.first + 1, r.n - 1})
	}
}

func (f *fifo) pushBack(t task, seq uint64, accepted int64) {
	f.fns.PushBack(t.fn) // nil for a waiter
	if t.w != nil {
		f.waiters.PushBack(t.w)
	}
	if accepted != 0 {
		f.accepted.PushBack(accepted)
	}
	if n := f.runs.Len(); n > 0 {
		if r := f.runs.Back(); r.first+r.n == seq {
			f.runs.Set(n-1, seqRun{r.first, r.n + 1})
			return
		}
	}
	f.runs.PushBack(seqRun{seq, 1})
}

func (f *fifo) pushFront(t task, seq uint64, accepted int64) {
	f.fns.PushFront(t.fn)
	if t.w != nil {
		f.waiters.PushFront(t.w)
	}
	if accepted != 0 {
		f.accepted.PushFront(accepted)
	}
	if f.runs.Len() > 0 {
		if r := f.runs.Front(); r.first == seq+1 {
			f.runs.Set(0, seqRun{seq, r.n + 1})
			return
		}
	}
	f.runs.PushFront(seqRun{seq, 1})
}
