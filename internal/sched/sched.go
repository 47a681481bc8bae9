// Package sched decides which of a pool's waiting tasks starts next, and
// what a stop drops. It is plain data: the pool's loop asks it ("may this
// task start now?", "which goes next?", "this task ended", "drop this
// queue") and acts on its answers. It has no goroutine, channel, clock,
// atomic or lock, and knows nothing of the pool: a task is a func or an
// opaque waiter W.
//
// Its rules:
//   - Within a queue (the pool's own, or a sub-pool's), tasks go in the
//     order the pool accepted them, except that a task whose key is busy
//     (a task with its key is running) waits until that task ends; the
//     other tasks, keyed or not, do not wait for it.
//   - Queues take turns, round robin. Each queue with waiting tasks has a
//     turn, a number: the next task comes from the queue with the lowest
//     turn among those with a task that may start, and that queue's next
//     turn is after every other's. A queue at its limit, or whose waiting
//     tasks all wait for busy keys, is passed over and keeps its turn, so
//     that once one of its tasks ends it goes first.
//   - A task handed out and taken back before it started goes back to the
//     front of its queue, and its queue to the turn it had when the task
//     was taken: as if it had never left.
//   - A stop drops waiting tasks in the one order the pool accepted them,
//     whatever their queues and keys.
//
// Turns cost the same however many queues there are: the queues that may
// start wait in a deque in the order of their turns, and those passed over
// wait aside, until a task's end lets them go back in.
package sched

import (
	"cmp"
	"slices"

	"github.com/gammazero/deque"
)

// A Scheduler holds every waiting task, in queues, and counts the running
// ones. Make one with New.
type Scheduler[W any] struct {
	own *Queue[W] // the pool's own queue
	// turns lists the queues with a task that may start, lowest turn
	// first; aside lists the queues with waiting tasks none of which may
	// start.
	turns deque.Deque[*Queue[W]]
	aside []*Queue[W]
	// now is the latest turn taken, and given numbers the turns given
	// (see turn.go).
	now   Turn
	given uint32
	// rejoined says that a queue passed over went back into the turns
	// since the loop last asked (Rejoined), and lowJoin is the lowest turn
	// such a queue had: the tasks handed out at later turns went before it.
	rejoined bool
	lowJoin  Turn
	// waiting counts the tasks waiting in every queue; reported counts the
	// running tasks whose end the loop must report (see Entry.Reported).
	waiting, reported int
	// max is the pool's maximum of workers: a queue's limit at or above it
	// holds nothing back.
	max int
	// gone holds the seqs of unkeyed tasks taken back by their submitters
	// that are still in their queue's fifo, behind its first task: they
	// are dropped as they reach its front.
	gone map[uint64]struct{}
	free []*Key[W] // unused keys, to reuse

	// Rates (see rate.go). clock is the time the loop last passed in; rate
	// and tat are the pool's rate and bucket. ratedWaiting counts the
	// tasks waiting in queues with a rate of their own or for their keys,
	// npaced the queues and keys that wait for a token, and resters the
	// keys kept while their buckets fill. hints says when to look at paced
	// queues and keys again, resting when at resting keys.
	clock                         int64
	rate                          Rate
	tat                           int64
	ratedWaiting, npaced, resters int
	hints, resting                hints[W]
}

// New returns a scheduler for a pool of at most max workers.
func New[W any](max int) *Scheduler[W] {
	return &Scheduler[W]{own: NewQueue[W](nil, 0), max: max}
}

// Own returns the pool's own queue.
func (s *Scheduler[W]) Own() *Queue[W] { return s.own }

// Waiting returns how many tasks wait, in every queue.
func (s *Scheduler[W]) Waiting() int { return s.waiting }

// Reported returns how many running tasks the loop must report the end
// of.
func (s *Scheduler[W]) Reported() int { return s.reported }

// Admit returns the entry of t, a task accepted for queue q (nil: the
// pool's own) at level (0 or more) with the seq seq, keyed by key if
// keyed, at the time accepted (0: not timed). The entry is not yet
// anywhere: Start it or Wait it.
func (s *Scheduler[W]) Admit(t Task[W], q *Queue[W], key string, keyed bool, level int32, seq uint64, accepted int64) Entry[W] {
	if q == nil {
		q = s.own
	}
	e := Entry[W]{Task: t, Queue: q, Seq: seq, Accepted: accepted, Level: level}
	if keyed {
		e.Key = q.key(key, &s.free)
		if e.Key.resting {
			e.Key.resting = false
			s.resters--
		}
	}
	e.Tokens = s.tokensFor(q, e.Key)
	return e
}

// StartsNow reports whether e, just admitted, may start at once: no task
// waits anywhere, its queue is under its limit, its key is free, and every
// rate that applies holds a token.
func (s *Scheduler[W]) StartsNow(e Entry[W]) bool {
	return s.waiting == 0 && e.Queue.underLimit(s.max) && (e.Key == nil || !e.Key.busy && s.keyHasToken(e.Key)) &&
		(e.Tokens == 0 || s.poolHasToken() && s.queueHasToken(e.Queue))
}

// Start counts e as running: handed out and not ended, and takes the
// tokens it is marked for. Every started entry is later passed to Ended,
// Left or PutBack. A task of a queue with no limit, no key and no rate
// (the pool's own, unkeyed, while the pool has no rate) changes nothing:
// the loop may hand such tasks out without starting them.
func (s *Scheduler[W]) Start(e Entry[W]) {
	if e.Queue.limited {
		e.Queue.running++
	}
	if k := e.Key; k != nil {
		k.busy = true
		e.Queue.held += k.fns.len()
	}
	if e.Reported() {
		s.reported++
	}
	s.takeTokens(e)
}

// count adds n to the tasks waiting, in q.
func (s *Scheduler[W]) count(q *Queue[W], n int) {
	s.waiting += n
	if q.rated() {
		s.ratedWaiting += n
	}
}

// Wait puts e, which may not start now, behind the waiting tasks of its
// queue and level. A queue that had none gets the last turn.
func (s *Scheduler[W]) Wait(e Entry[W]) {
	q := e.Queue
	s.count(q, 1)
	if q.waiting > 0 {
		s.push(e)
		s.review(q)
		return
	}
	q.turn = s.nextTurn(q.stride)
	s.push(e)
	s.enter(q)
}

// push puts e, a task of its queue, behind the waiting tasks of its level:
// in its fifo, or in its key's queue.
func (s *Scheduler[W]) push(e Entry[W]) {
	q := e.Queue
	q.waiting++
	k := e.Key
	if k == nil {
		q.levelOf(e.Level).fifo.pushBack(e.Task, e.Seq, e.Accepted)
		return
	}
	k.pushBack(e)
	switch {
	case k.busy || k.paced:
		q.held++
		if k.paced {
			q.heldPaced++
		}
	case k.fns.len() == 1:
		s.free1(k)
	}
}

// free1 lets k, free with waiting tasks and in no ready heap, start its
// next: at once if its bucket holds a token, else once it does.
func (s *Scheduler[W]) free1(k *Key[W]) {
	if s.keyHasToken(k) {
		k.ready()
		return
	}
	s.paceKey(k)
}

// pushFront puts e, a task of its queue handed out and taken back before
// it started, back in front of the waiting tasks of its level: it was
// accepted before them. Its key is no longer busy.
func (s *Scheduler[W]) pushFront(e Entry[W]) {
	q := e.Queue
	q.waiting++
	k := e.Key
	if k == nil {
		q.levelOf(e.Level).fifo.pushFront(e.Task, e.Seq, e.Accepted)
		return
	}
	k.busy = false
	q.held -= k.fns.len()
	k.unready()
	k.pushFront(e)
	s.free1(k)
}

// Stuck reports whether tasks wait but none may start, nor will with time
// alone: each waits for a place under its queue's limit, or for its key.
func (s *Scheduler[W]) Stuck() bool { return s.waiting > 0 && s.turns.Len() == 0 && s.npaced == 0 }

// Peek returns the task to hand out next, if one may start: of the queue
// whose turn it is, the first, with that turn and the tokens it takes. It
// changes nothing; Take hands it out.
func (s *Scheduler[W]) Peek() (Entry[W], bool) {
	if s.turns.Len() == 0 || !s.poolHasToken() {
		return Entry[W]{}, false
	}
	q := s.turns.Front()
	e := q.first()
	e.Turn = q.turn
	e.Tokens = s.tokensFor(q, e.Key)
	return e, true
}

// Take removes the task that Peek returned, starts it, and gives its queue
// its next turn. The entry it returns has the turn it took.
func (s *Scheduler[W]) Take() Entry[W] {
	q := s.turns.PopFront()
	q.inTurns = false
	e := q.first()
	e.Turn = q.turn
	e.Tokens = s.tokensFor(q, e.Key)
	q.remove(e)
	if len(s.gone) > 0 {
		s.dropGone(q.levelOf(e.Level))
	}
	s.count(q, -1)
	s.Start(e)
	if s.now.Before(q.turn.at()) {
		s.now = q.turn.at()
	}
	q.turn = s.nextTurn(q.stride)
	s.enter(q)
	return e
}

// NextTurn returns the turn q would get if it had a task waiting: after
// every turn given so far of a queue of its weight. A task handed out
// without waiting takes one too, so that if it comes back it goes where it
// would have waited.
func (s *Scheduler[W]) NextTurn(q *Queue[W]) Turn { return s.nextTurn(q.stride) }

// Ended counts e, a started task, as no longer running: it ran, or it was
// dropped without running. Its queue has room under its limit again, and
// its key's next task may start.
func (s *Scheduler[W]) Ended(e Entry[W]) {
	s.unstart(e)
	if e.Key != nil {
		s.keyEnded(e.Key)
	}
	s.review(e.Queue)
}

// keyEnded frees k, whose running task ended: its next task may start, once
// its bucket holds a token; with none waiting, the key goes, once its
// bucket is full.
func (s *Scheduler[W]) keyEnded(k *Key[W]) {
	q := k.queue
	k.busy = false
	if n := k.fns.len(); n > 0 {
		q.held -= n
		s.free1(k)
		return
	}
	if !s.keyFull(k) {
		s.rest(k)
		return
	}
	q.forget(k, &s.free)
}

// unstart undoes what Start counted.
func (s *Scheduler[W]) unstart(e Entry[W]) {
	if e.Queue.limited {
		e.Queue.running--
	}
	if e.Reported() {
		s.reported--
	}
}

// Lend counts e, a running task whose worker waits on the pool, as not
// running for its queue's limit while it waits: another task of the queue
// may take its place. Its key stays busy. Reclaim ends the loan; a task
// that ends while its place is lent must be reclaimed first.
func (s *Scheduler[W]) Lend(e Entry[W]) {
	if e.Queue.limited {
		e.Queue.running--
		e.Queue.lent++
		s.review(e.Queue)
	}
}

// Reclaim counts e, whose place Lend lent, as running again: its queue may
// be over its limit until one of its tasks ends.
func (s *Scheduler[W]) Reclaim(e Entry[W]) {
	if e.Queue.limited {
		e.Queue.running++
		e.Queue.lent--
		s.review(e.Queue)
	}
}

// Left counts e, a started task that its submitter gave up on before a
// worker took it, as ended, gives back its tokens, and gives its queue
// back the turn e took: e never ran, as if it had never been handed out.
func (s *Scheduler[W]) Left(e Entry[W]) {
	s.refund(e)
	s.Ended(e)
	s.rewind(e.Queue, e.Turn)
}

// PutBack returns tasks that were started but never reached a worker,
// listed in the order they were handed out, with the turns they took, to
// the front of their queues, gives back their tokens, and gives each queue
// back the first turn its tasks took: they are handed out again first, as
// if they had never left.
func (s *Scheduler[W]) PutBack(tasks []Entry[W]) {
	for _, e := range slices.Backward(tasks) {
		q := e.Queue
		s.unstart(e)
		s.refund(e)
		s.leave(q)
		if q.waiting == 0 || e.Turn.Before(q.turn) {
			q.turn = e.Turn
		}
		s.pushFront(e)
		s.count(q, 1)
		s.enter(q)
	}
}

// rewind gives q, if it has waiting tasks, turn if that is earlier than
// its own. A queue that may start and goes back in the turns is one the
// loop hears of (Rejoined), as review says.
func (s *Scheduler[W]) rewind(q *Queue[W], turn Turn) {
	if q.waiting == 0 || !turn.Before(q.turn) {
		return
	}
	s.leave(q)
	q.turn = turn
	s.enter(q)
	if q.inTurns {
		s.noteRejoin(q)
	}
}

// A place is where a queue with waiting tasks belongs.
type place uint8

const (
	nowhere place = iota // no task waits
	aside                // none may start: each waits for a place under its limit, or for its key
	paced                // one may start, but for a token of its queue's rate
	inTurns              // one may start
)

// placeOf returns where q belongs now.
func (s *Scheduler[W]) placeOf(q *Queue[W]) place {
	switch {
	case q.waiting == 0:
		return nowhere
	case !q.hasReady() || !q.underLimit(s.max):
		return aside
	case !s.queueHasToken(q):
		return paced
	}
	return inTurns
}

// placed returns where q is.
func (q *Queue[W]) placed() place {
	switch {
	case q.inTurns:
		return inTurns
	case q.paced:
		return paced
	case q.asideAt > 0:
		return aside
	}
	return nowhere
}

// enter puts q, whose tasks or counts changed, where it belongs: in the
// turns, at its turn, if a task of it may start; aside if it has waiting
// tasks and none may, or may only once its rate holds a token; nowhere if
// it has none. It must be in neither.
func (s *Scheduler[W]) enter(q *Queue[W]) {
	switch s.placeOf(q) {
	case nowhere:
	case paced:
		q.paced = true
		s.npaced++
		s.hintQueue(q)
		fallthrough
	case aside:
		s.aside = append(s.aside, q)
		q.asideAt = len(s.aside) // 1 + its index
	case inTurns:
		q.inTurns = true
		if s.turns.Len() == 0 || s.turns.Back().turn.Before(q.turn) {
			s.turns.PushBack(q) // the common case: the last turn
			return
		}
		s.turns.Insert(s.turnIndex(q.turn), q)
	}
}

// leave takes q out of the turns or from aside, wherever enter put it.
func (s *Scheduler[W]) leave(q *Queue[W]) {
	if q.paced {
		q.paced = false
		s.npaced--
	}
	switch {
	case q.inTurns:
		q.inTurns = false
		if s.turns.Front() == q {
			s.turns.PopFront()
			return
		}
		s.turns.Remove(s.turnIndex(q.turn))
	case q.asideAt > 0:
		last := s.aside[len(s.aside)-1]
		s.aside[q.asideAt-1], last.asideAt = last, q.asideAt
		s.aside[len(s.aside)-1] = nil
		s.aside = s.aside[:len(s.aside)-1]
		q.asideAt = 0
	}
}

// turnIndex returns the index in the turns of the first queue whose turn is
// not before turn.
func (s *Scheduler[W]) turnIndex(turn Turn) int {
	i, j := 0, s.turns.Len()
	for i < j {
		h := int(uint(i+j) >> 1)
		if s.turns.At(h).turn.Before(turn) {
			i = h + 1
		} else {
			j = h
		}
	}
	return i
}

// review moves q between the turns and aside if whether a task of it may
// start has changed. A queue that goes back into the turns keeps its turn,
// and the loop hears of it (Rejoined).
func (s *Scheduler[W]) review(q *Queue[W]) {
	if q.placed() == s.placeOf(q) {
		return
	}
	s.leave(q)
	s.enter(q)
	if q.inTurns {
		s.noteRejoin(q)
	}
}

// noteRejoin records that q went back into the turns, at its turn.
func (s *Scheduler[W]) noteRejoin(q *Queue[W]) {
	if !s.rejoined || q.turn.Before(s.lowJoin) {
		s.lowJoin = q.turn
	}
	s.rejoined = true
}

// Rejoined reports whether a queue passed over went back into the turns
// since the last call, and returns the lowest turn such a queue had: the
// tasks handed out at later turns went out before it, and should come
// back to go after it.
func (s *Scheduler[W]) Rejoined() (turn Turn, ok bool) {
	ok, s.rejoined = s.rejoined, false
	return s.lowJoin, ok
}

// DropAll removes every waiting task, of every queue, and returns them in
// the order the pool accepted them.
func (s *Scheduler[W]) DropAll() []Entry[W] {
	var tasks []Entry[W]
	for s.turns.Len() > 0 {
		q := s.turns.Front()
		s.leave(q)
		tasks = s.drain(tasks, q)
	}
	for len(s.aside) > 0 {
		q := s.aside[len(s.aside)-1]
		s.leave(q)
		tasks = s.drain(tasks, q)
	}
	slices.SortFunc(tasks, BySeq)
	return tasks
}

// DropQueue removes every waiting task of q and returns them in the order
// the pool accepted them.
func (s *Scheduler[W]) DropQueue(q *Queue[W]) []Entry[W] {
	if q.waiting == 0 {
		return nil
	}
	s.leave(q)
	tasks := s.drain(nil, q)
	slices.SortFunc(tasks, BySeq)
	return tasks
}

func (s *Scheduler[W]) drain(tasks []Entry[W], q *Queue[W]) []Entry[W] {
	s.count(q, -q.waiting)
	n := len(tasks)
	tasks = s.drainQueue(tasks, q)
	if len(s.gone) == 0 {
		return tasks
	}
	kept := tasks[:n]
	for _, e := range tasks[n:] {
		if _, gone := s.gone[e.Seq]; gone && e.Key == nil {
			delete(s.gone, e.Seq) // given up on: neither run nor dropped
			continue
		}
		kept = append(kept, e)
	}
	s.forgetGone()
	return kept
}

// Cancel removes the task numbered seq, an unkeyed one of queue q at
// level, if it waits there, and reports whether it did. Its submitter gave
// up on it: it never runs, and a stop does not return it.
func (s *Scheduler[W]) Cancel(q *Queue[W], level int32, seq uint64) bool {
	l := q.findLevel(level)
	if _, gone := s.gone[seq]; gone || l == nil || !l.fifo.holds(seq) {
		return false
	}
	if s.gone == nil {
		s.gone = make(map[uint64]struct{})
	}
	s.leave(q)
	s.gone[seq] = struct{}{}
	q.waiting--
	s.count(q, -1)
	s.dropGone(l)
	s.enter(q)
	return true
}

// dropGone drops the tasks at the front of l's fifo whose submitters gave
// up on them, so that its first task is one that may run.
func (s *Scheduler[W]) dropGone(l *level[W]) {
	for len(s.gone) > 0 && l.fifo.len() > 0 {
		seq, _ := l.fifo.frontSeq()
		if _, gone := s.gone[seq]; !gone {
			return
		}
		delete(s.gone, seq)
		l.fifo.popFront()
	}
	s.forgetGone()
}

// forgetGone lets the map of given-up tasks go once it is empty: a map
// never shrinks, and a burst of tasks given up would keep its size.
func (s *Scheduler[W]) forgetGone() {
	if s.gone != nil && len(s.gone) == 0 {
		s.gone = nil
	}
}

// BySeq orders entries as the pool accepted them.
func BySeq[W any](a, b Entry[W]) int { return cmp.Compare(a.Seq, b.Seq) }

// SetMax records the pool's new maximum of workers, which may let queues
// at their limits start tasks, or hold them back.
func (s *Scheduler[W]) SetMax(n int) {
	s.max = n
	queues := slices.Clone(s.aside)
	for q := range s.turns.Iter() {
		queues = append(queues, q)
	}
	for _, q := range queues {
		s.review(q)
	}
}

// SetLimit sets q's limit (q must have one: a sub-pool's).
func (s *Scheduler[W]) SetLimit(q *Queue[W], limit int) {
	q.limit = limit
	s.review(q)
}

// Idle reports whether q has no task waiting or running, those whose
// places are lent included.
func (s *Scheduler[W]) Idle(q *Queue[W]) bool { return q.waiting == 0 && q.running == 0 && q.lent == 0 }

// MayBuffer reports whether q's tasks may wait in the hand-off's outbox,
// ahead of the workers: not while a key holds back one of its tasks (a
// busy key, or one waiting for a token), so that once its key is free
// that task finds no later one of its queue handed out before it; and not
// while a rate applies to them, so that a task starts as it takes its
// token, and tasks handed out at the rate's pace cannot pile up there and
// start in a burst. Then its tasks go only to a worker free to start them
// at once.
func (s *Scheduler[W]) MayBuffer(q *Queue[W]) bool {
	return q.held == 0 && s.rate.None() && !q.rated()
}

// Queues returns the queues with waiting tasks in the order of their
// turns, those set aside included: what the tests compare with their
// model.
func (s *Scheduler[W]) Queues() []*Queue[W] {
	var queues []*Queue[W]
	for q := range s.turns.Iter() {
		queues = append(queues, q)
	}
	queues = append(queues, s.aside...)
	slices.SortFunc(queues, func(a, b *Queue[W]) int {
		switch {
		case a.turn.Before(b.turn):
			return -1
		case b.turn.Before(a.turn):
			return 1
		}
		return 0
	})
	return queues
}
