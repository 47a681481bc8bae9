package sched

import "container/heap"

// A Task is what the scheduler holds of a submitted task: a func, or a
// waiter W, the pool's record of a task whose submitter learns what became
// of it. Exactly one is set. The scheduler never looks inside W.
type Task[W any] struct {
	Fn func()
	W  W
}

// An Entry is a task as the scheduler knows it: its queue, its key (nil if
// it has none), its level, its seq, which numbers the tasks in the order
// the pool accepted them, from 1, and when it was accepted (nanoseconds,
// plus one, if the pool times its tasks; else 0). Turn is the turn its
// queue took for it, once it is handed out: a task taken back goes back
// to it. Tokens says which rates it takes a token from as it starts, and
// gives back if it is taken back.
type Entry[W any] struct {
	Task[W]
	Queue    *Queue[W]
	Key      *Key[W]
	Seq      uint64
	Accepted int64
	Turn     Turn
	Level    int32
	Tokens   Tokens
}

// Reported reports whether the scheduler must hear when e ends: a keyed
// task frees its key, and a task of a queue with a limit frees a place
// under it. It reads nothing that changes, so workers may ask it too.
func (e *Entry[W]) Reported() bool { return e.Key != nil || e.Queue.limited }

// A Queue is one of the scheduler's queues: the pool's own, or a
// sub-pool's. It holds its waiting tasks by level, highest first, and in
// each level unkeyed ones in a fifo, keyed ones in the queues of their
// keys. Of the waiting tasks that may start, it hands out one of the
// highest level, the one accepted first. An unkeyed task may always
// start; a keyed one may when its key is not busy (no task with its key
// is running: handed out and not yet ended) and, if its queue gives keys
// a rate, its key's bucket holds a token. So a busy key holds back its own
// tasks and no others. A key's tasks go in the order accepted, whatever
// their levels: a key waits in the level of its first task.
type Queue[W any] struct {
	// Owner is what the queue belongs to, for the loop; the scheduler never
	// reads it. limited says that the queue has a limit of its own, for
	// ever: a sub-pool's. Set when the queue is made, both are read by
	// workers for every task they run, so they sit on a cache line of
	// their own, apart from the counts the loop writes for every task.
	Owner   any
	limited bool
	_       [64 - 24]byte

	// limit is the most tasks of the queue that may run at once, if it is
	// limited. running counts the queue's tasks handed out and not yet
	// ended, less those whose workers lent their places (see Lend), which
	// lent counts: only if the queue is limited, as no other needs them.
	limit, running, lent int

	// levels holds the waiting tasks by level, highest first; the levels
	// the queue has seen stay.
	levels []*level[W]
	// keys holds every key with a task waiting or running, or whose bucket
	// is filling up.
	keys map[string]*Key[W]
	// mostKeys is the most keys held at once since keys was made: see
	// forget.
	mostKeys int

	waiting int // tasks waiting: in the fifos and in the keys' queues
	// held counts the waiting tasks of keys that are busy or wait for a
	// token; heldPaced those of the latter.
	held, heldPaced int
	// turn is the queue's place in the turns while it has waiting tasks;
	// inTurns says whether it is in the turns, and asideAt is 1 + its
	// index among the queues set aside, or 0. paced says it is aside
	// only for a token of its rate.
	turn    Turn
	inTurns bool
	asideAt int
	paced   bool
	stride  uint32 // of its weight (see SetWeight)

	// rate is the queue's rate, and tat its bucket; keyRate each key's.
	rate    Rate
	tat     int64
	keyRate Rate
}

// A level is a queue's waiting tasks of one level.
type level[W any] struct {
	n    int32
	fifo fifo[W] // unkeyed waiting tasks
	// ready holds the keys whose first waiting task is of this level and
	// may start, earliest first.
	ready keyHeap[W]
}

// NewQueue returns a queue for owner with a limit of its own (limit ≥ 1),
// or, with limit 0, none.
func NewQueue[W any](owner any, limit int) *Queue[W] {
	q := &Queue[W]{Owner: owner, limited: limit > 0, limit: limit}
	q.levels = []*level[W]{{}}
	return q
}

// Waiting returns how many tasks wait in the queue.
func (q *Queue[W]) Waiting() int { return q.waiting }

// Running returns how many of the queue's tasks are out (handed out and
// not yet ended), less those whose places are lent.
func (q *Queue[W]) Running() int { return q.running }

// Lent returns how many of the queue's tasks out lent their places.
func (q *Queue[W]) Lent() int { return q.lent }

// rated reports whether the queue or its keys have a rate.
func (q *Queue[W]) rated() bool { return !q.rate.None() || !q.keyRate.None() }

// levelOf returns the queue's level n, made if it has none.
func (q *Queue[W]) levelOf(n int32) *level[W] {
	if l := q.levels[len(q.levels)-1]; l.n == n {
		return l // the lowest: level 0, unless levels below it came
	}
	i := 0
	for i < len(q.levels) && q.levels[i].n > n {
		i++
	}
	if i < len(q.levels) && q.levels[i].n == n {
		return q.levels[i]
	}
	l := &level[W]{n: n}
	q.levels = append(q.levels, nil)
	copy(q.levels[i+1:], q.levels[i:])
	q.levels[i] = l
	return l
}

// findLevel returns the queue's level n, or nil.
func (q *Queue[W]) findLevel(n int32) *level[W] {
	for _, l := range q.levels {
		if l.n == n {
			return l
		}
	}
	return nil
}

// A Key is the queue of one key's tasks in one Queue. A key has one only
// while a task with it waits or runs, or while its bucket fills up, so an
// idle key costs nothing. A keyed task is always a func.
type Key[W any] struct {
	name     string
	queue    *Queue[W]
	fns      ring[func()] // waiting, in acceptance order
	seqs     rising       // their seqs
	accepted rising       // when the pool accepted them, if it times its tasks
	// levels holds their levels, or nothing while they are all 0.
	levels ring[int32]
	busy   bool // a task with the key is running
	// paced says that the key waits for a token of its rate: its tasks
	// are held; resting that it has no task waiting or running, and
	// waits for its bucket to fill up before it goes.
	paced, resting bool
	tat            int64     // its bucket, if its queue gives keys a rate
	at             int       // the key's index in a level's ready heap, or -1
	in             *level[W] // the level whose ready heap holds it
}

// level returns the level of the key's first waiting task.
func (k *Key[W]) level() int32 {
	if k.levels.len() == 0 {
		return 0
	}
	return k.levels.front()
}

// hasReady reports whether the queue has a waiting task that no key
// holds back.
func (q *Queue[W]) hasReady() bool { return q.waiting > q.held }

// underLimit reports whether one more of the queue's tasks may run. A
// limit at or above the pool's maximum, max, never holds a task back: the
// maximum does.
func (q *Queue[W]) underLimit(max int) bool {
	return !q.limited || q.running < q.limit || q.limit >= max
}

// first returns the queue's waiting task that goes first among those that
// may start: of the highest level, the one accepted first. The queue must
// have one.
func (q *Queue[W]) first() Entry[W] {
	for _, l := range q.levels {
		seq, unkeyed := l.fifo.frontSeq()
		if l.ready.Len() > 0 {
			k := l.ready[0]
			if s := k.seqs.first(); !unkeyed || s < seq {
				return Entry[W]{Task: Task[W]{Fn: k.fns.front()}, Queue: q, Key: k, Seq: s, Accepted: int64(k.accepted.first()), Level: l.n}
			}
		}
		if unkeyed {
			return Entry[W]{Task: l.fifo.front(), Queue: q, Seq: seq, Accepted: l.fifo.firstAccepted(), Level: l.n}
		}
	}
	panic("sched: first: no task may start")
}

// remove takes e, which first returned, out of the queue.
func (q *Queue[W]) remove(e Entry[W]) {
	q.waiting--
	if e.Key == nil {
		q.levelOf(e.Level).fifo.popFront()
		return
	}
	e.Key.unready()
	e.Key.popFront()
}

// ready puts k, free with a task that may start, in the ready heap of its
// first task's level.
func (k *Key[W]) ready() {
	k.in = k.queue.levelOf(k.level())
	heap.Push(&k.in.ready, k)
}

// unready takes k out of the ready heap it is in, if any.
func (k *Key[W]) unready() {
	if k.in != nil && k.at >= 0 {
		heap.Remove(&k.in.ready, k.at)
	}
	k.in = nil
}

// pushBack adds e, a task of the key, behind its others.
func (k *Key[W]) pushBack(e Entry[W]) {
	if e.Level != 0 && k.levels.len() == 0 {
		for range k.fns.len() {
			k.levels.pushBack(0)
		}
	}
	if k.levels.len() > 0 || e.Level != 0 {
		k.levels.pushBack(e.Level)
	}
	k.fns.pushBack(e.Fn)
	k.seqs.pushBack(e.Seq)
	if e.Accepted != 0 {
		k.accepted.pushBack(uint64(e.Accepted))
	}
}

// pushFront puts e, a task of the key taken back, in front of its others.
func (k *Key[W]) pushFront(e Entry[W]) {
	if e.Level != 0 && k.levels.len() == 0 {
		for range k.fns.len() {
			k.levels.pushBack(0)
		}
	}
	if k.levels.len() > 0 || e.Level != 0 {
		k.levels.pushFront(e.Level)
	}
	k.fns.pushFront(e.Fn)
	k.seqs.pushFront(e.Seq)
	if e.Accepted != 0 {
		k.accepted.pushFront(uint64(e.Accepted))
	}
}

// popFront removes the key's first waiting task.
func (k *Key[W]) popFront() {
	k.fns.popFront()
	k.seqs.popFront()
	if k.accepted.len() > 0 {
		k.accepted.popFront()
	}
	if k.levels.len() > 0 {
		k.levels.popFront()
	}
}

// key returns name's Key in the queue, made if it has none; free holds
// unused keys to reuse.
func (q *Queue[W]) key(name string, free *[]*Key[W]) *Key[W] {
	if k := q.keys[name]; k != nil {
		return k
	}
	if q.keys == nil {
		q.keys = make(map[string]*Key[W])
	}
	var k *Key[W]
	if n := len(*free); n > 0 {
		k, *free = (*free)[n-1], (*free)[:n-1]
	} else {
		k = new(Key[W])
	}
	k.name, k.queue, k.at, k.in = name, q, -1, nil
	q.keys[name] = k
	q.mostKeys = max(q.mostKeys, len(q.keys))
	return k
}

// maxFreeKeys is how many unused keys the scheduler keeps, so that keys
// that come and go cost no allocation: enough for a task of a different
// key on each of a hundred workers and in the hand-off's outbox.
const maxFreeKeys = 128

// smallKeyMap is the most keys whose map a queue keeps however few it
// holds, so that keys that come and go do not remake it.
const smallKeyMap = 64

// forget drops k, which has no task waiting or running, and keeps up to
// maxFreeKeys keys, with their buffers, for keys to come. A map keeps the
// memory of the most keys it ever held, so once the queue holds a quarter
// of that, its keys move to a map of their present size, unless the most
// is small enough to keep (smallKeyMap).
func (q *Queue[W]) forget(k *Key[W], free *[]*Key[W]) {
	delete(q.keys, k.name)
	if len(*free) < maxFreeKeys {
		// its buffers kept
		k.name, k.queue, k.at, k.in, k.busy, k.paced, k.resting, k.tat = "", nil, -1, nil, false, false, false, 0
		*free = append(*free, k)
	}
	if n := len(q.keys); n < q.mostKeys/4 && q.mostKeys > smallKeyMap {
		keys := make(map[string]*Key[W], n)
		for name, k := range q.keys {
			keys[name] = k
		}
		q.keys, q.mostKeys = keys, n
	}
}

// drainQueue removes every waiting task of q and appends it to tasks, in
// no particular order. The keys that are busy stay, with no task waiting,
// until their task ends, and those whose buckets fill up until they are
// full; the others go.
func (s *Scheduler[W]) drainQueue(tasks []Entry[W], q *Queue[W]) []Entry[W] {
	for _, l := range q.levels {
		for l.fifo.len() > 0 {
			seq, _ := l.fifo.frontSeq()
			tasks = append(tasks, Entry[W]{Task: l.fifo.front(), Queue: q, Seq: seq, Accepted: l.fifo.firstAccepted(), Level: l.n})
			l.fifo.popFront()
		}
		clear(l.ready)
		l.ready = l.ready[:0]
	}
	for _, k := range q.keys {
		for k.fns.len() > 0 {
			tasks = append(tasks, Entry[W]{Task: Task[W]{Fn: k.fns.front()}, Queue: q, Key: k, Seq: k.seqs.first(), Accepted: int64(k.accepted.first()), Level: k.level()})
			k.popFront()
		}
		k.at, k.in = -1, nil
		if k.paced {
			k.paced = false
			s.npaced--
		}
		switch {
		case k.busy || k.resting:
		case !s.keyFull(k):
			s.rest(k) // a drop does not refill its bucket
		default:
			q.forget(k, &s.free)
		}
	}
	q.waiting, q.held, q.heldPaced = 0, 0, 0
	return tasks
}

// A keyHeap orders keys by the seq of their first waiting task: the ready
// keys of a queue, for container/heap.
type keyHeap[W any] []*Key[W]

func (h keyHeap[W]) Len() int           { return len(h) }
func (h keyHeap[W]) Less(i, j int) bool { return h[i].seqs.first() < h[j].seqs.first() }
func (h keyHeap[W]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *keyHeap[W]) Push(x any) {
	k := x.(*Key[W])
	k.at = len(*h)
	*h = append(*h, k)
}
func (h *keyHeap[W]) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	if n := len(*h); n < cap(*h)/4 && cap(*h) > smallKeyMap {
		*h = append(keyHeap[W](nil), *h...) // gives back the memory of a burst of keys
	}
	k.at = -1
	return k
}

// A fifo is a queue of unkeyed tasks, with their seqs. A func costs 12
// bytes in it, a waiter 28: its seq is kept apart, as a gap of 4 bytes
// from the one before (see rising).
type fifo[W any] struct {
	fns      ring[func()] // nil: the next of waiters
	waiters  ring[W]
	seqs     rising
	accepted rising // when the pool accepted each task, if it times its tasks: empty otherwise
}

func (f *fifo[W]) len() int { return f.fns.len() }

// holds reports whether the task numbered seq may be in the fifo: whether
// seq is within the seqs of its first and last tasks. The fifo holds every
// unkeyed task of its queue in that range that its submitter has not given
// up on: a queue's tasks leave it first in, first out, and come back to
// its front.
func (f *fifo[W]) holds(seq uint64) bool {
	return f.seqs.len() > 0 && f.seqs.first() <= seq && seq <= f.seqs.last
}

// front returns the first task; the fifo must not be empty.
func (f *fifo[W]) front() Task[W] {
	if fn := f.fns.front(); fn != nil {
		return Task[W]{Fn: fn}
	}
	return Task[W]{W: f.waiters.front()}
}

// firstAccepted returns when the pool accepted the first task, or 0 if it
// does not time its tasks.
func (f *fifo[W]) firstAccepted() int64 { return int64(f.accepted.first()) }

// frontSeq returns the first task's seq, and false if there is none.
func (f *fifo[W]) frontSeq() (uint64, bool) {
	if f.seqs.len() == 0 {
		return 0, false
	}
	return f.seqs.first(), true
}

func (f *fifo[W]) popFront() {
	if f.fns.popFront() == nil {
		f.waiters.popFront()
	}
	f.seqs.popFront()
	if f.accepted.len() > 0 {
		f.accepted.popFront()
	}
}

func (f *fifo[W]) pushBack(t Task[W], seq uint64, accepted int64) {
	f.fns.pushBack(t.Fn) // nil for a waiter
	if t.Fn == nil {
		f.waiters.pushBack(t.W)
	}
	f.seqs.pushBack(seq)
	if accepted != 0 {
		f.accepted.pushBack(uint64(accepted))
	}
}

func (f *fifo[W]) pushFront(t Task[W], seq uint64, accepted int64) {
	f.fns.pushFront(t.Fn)
	if t.Fn == nil {
		f.waiters.pushFront(t.W)
	}
	f.seqs.pushFront(seq)
	if accepted != 0 {
		f.accepted.pushFront(uint64(accepted))
	}
}
