package sched

import (
	"container/heap"
	"math"
)

// Rates. A rate lets at most Burst tasks start at once and refills one
// start every Interval: a token bucket. The pool, a queue, and each key
// of a queue may have one; a task starts only if every rate that applies
// to it has a token, and takes one from each as it is handed out. A task
// taken back before it started gives its tokens back, once.
//
// A bucket is kept as the time at which it will be full again, tat (the
// theoretical arrival time of the generic cell rate algorithm): it holds
// a token at now if now >= tat - (Burst-1)*Interval, and a start moves
// tat on by Interval from the later of tat and now. A full bucket's tat is
// 0 or in the past. So a bucket costs one number, and time passing costs
// nothing until someone looks.
//
// The scheduler reads no clock: the loop passes the time in (SetNow), in
// nanoseconds from an epoch of its own, at least 1, and asks when the next
// task held back by a rate may start (NextStart).

// A Rate is a bucket's shape: a start every Interval nanoseconds, at most
// Burst at once. The zero Rate is none: no limit.
type Rate struct {
	Interval int64 // > 0 for a rate
	Burst    int64 // >= 1 for a rate
}

// None reports whether r is no rate at all.
func (r Rate) None() bool { return r.Interval <= 0 }

// slack is how far tat may be ahead of now with a token still there.
func (r Rate) slack() int64 { return mulSat(r.Burst-1, r.Interval) }

// readyAt returns the first time a bucket at tat holds a token.
func (r Rate) readyAt(tat int64) int64 { return tat - r.slack() }

// has reports whether a bucket at tat holds a token at now.
func (r Rate) has(tat, now int64) bool { return now >= r.readyAt(tat) }

// take returns tat once a token is taken at now.
func (r Rate) take(tat, now int64) int64 { return addSat(max(tat, now), r.Interval) }

// full reports whether a bucket at tat is full at now.
func (r Rate) full(tat, now int64) bool { return tat <= now }

// reshape returns the tat of a bucket of shape to that holds, at now, the
// whole tokens that a bucket of shape r at tat holds (a part of a token is
// lost), at most to's burst; a full bucket stays full. So a key's bucket,
// which the scheduler forgets once full, is the same whether or not it
// was forgotten.
func (r Rate) reshape(to Rate, tat, now int64) int64 {
	if tat <= now {
		return now // full
	}
	missing := (tat - now + r.Interval - 1) / r.Interval
	tokens := min(max(r.Burst-missing, 0), to.Burst)
	if tokens == to.Burst {
		return now
	}
	return addSat(now, mulSat(to.Burst-tokens, to.Interval))
}

func mulSat(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/4/a {
		return math.MaxInt64 / 4
	}
	return a * b
}

func addSat(a, b int64) int64 { return min(a, math.MaxInt64/4-b) + b }

// Tokens says which buckets a task took a token from as it was handed out:
// those it gives back if it is taken back.
type Tokens uint8

const (
	PoolToken  Tokens = 1 << iota // the pool's rate
	QueueToken                    // its queue's rate
	KeyToken                      // its key's rate
)

// tokensFor returns the tokens a task of q with key k takes as it starts.
func (s *Scheduler[W]) tokensFor(q *Queue[W], k *Key[W]) Tokens {
	var t Tokens
	if !s.rate.None() {
		t |= PoolToken
	}
	if !q.rate.None() {
		t |= QueueToken
	}
	if k != nil && !q.keyRate.None() {
		t |= KeyToken
	}
	return t
}

// takeTokens takes the tokens e is marked for.
func (s *Scheduler[W]) takeTokens(e Entry[W]) {
	if e.Tokens == 0 {
		return
	}
	if e.Tokens&PoolToken != 0 && !s.rate.None() {
		s.tat = s.rate.take(s.tat, s.clock)
	}
	if q := e.Queue; e.Tokens&QueueToken != 0 && !q.rate.None() {
		q.tat = q.rate.take(q.tat, s.clock)
	}
	if k := e.Key; e.Tokens&KeyToken != 0 && !e.Queue.keyRate.None() {
		k.tat = e.Queue.keyRate.take(k.tat, s.clock)
	}
}

// refund gives back the tokens e took: it was taken back before it
// started. A bucket whose rate changed since takes it back as it is now;
// one removed takes nothing.
func (s *Scheduler[W]) refund(e Entry[W]) {
	if e.Tokens == 0 {
		return
	}
	if e.Tokens&PoolToken != 0 && !s.rate.None() {
		s.tat = addSat(s.tat, -s.rate.Interval)
	}
	if q := e.Queue; e.Tokens&QueueToken != 0 && !q.rate.None() {
		q.tat = addSat(q.tat, -q.rate.Interval)
		if q.paced {
			s.hintQueue(q) // sooner
		}
	}
	if k := e.Key; e.Tokens&KeyToken != 0 && !e.Queue.keyRate.None() {
		k.tat = addSat(k.tat, -e.Queue.keyRate.Interval)
	}
}

// poolHasToken reports whether the pool's rate, if any, lets a task start.
func (s *Scheduler[W]) poolHasToken() bool { return s.rate.None() || s.rate.has(s.tat, s.clock) }

// queueHasToken reports whether q's rate, if any, lets a task start.
func (s *Scheduler[W]) queueHasToken(q *Queue[W]) bool {
	return q.rate.None() || q.rate.has(q.tat, s.clock)
}

// keyHasToken reports whether k's rate, if any, lets its next task start.
func (s *Scheduler[W]) keyHasToken(k *Key[W]) bool {
	r := k.queue.keyRate
	return r.None() || r.has(k.tat, s.clock)
}

// SetNow tells the scheduler the time. Queues and keys that a rate held
// back and that hold a token now may start: a queue goes back to the turn
// it kept, and the loop hears of it (Rejoined), as of a queue freed from
// its limit. Keys that wait for nothing and whose buckets are full again
// are forgotten.
func (s *Scheduler[W]) SetNow(now int64) {
	s.clock = now
	for len(s.hints) > 0 && s.hints[0].at <= now {
		h := heap.Pop(&s.hints).(hint[W])
		s.look(h)
	}
	for len(s.resting) > 0 && s.resting[0].at <= now {
		h := heap.Pop(&s.resting).(hint[W])
		switch k := h.k; {
		case k.queue != h.q || !k.resting:
		case s.keyFull(k):
			k.resting = false
			s.resters--
			h.q.forget(k, &s.free)
		default:
			heap.Push(&s.resting, hint[W]{at: k.tat, q: k.queue, k: k}) // its rate changed
		}
	}
}

// keyFull reports whether k's bucket is full, or it has no rate.
func (s *Scheduler[W]) keyFull(k *Key[W]) bool {
	r := k.queue.keyRate
	return r.None() || r.full(k.tat, s.clock)
}

// look looks again at what hint h names, now that its time has come: a
// queue or key that still waits for a token is hinted again at the time
// its bucket holds one now.
func (s *Scheduler[W]) look(h hint[W]) {
	if k := h.k; k != nil {
		switch {
		case k.queue != h.q || !k.paced:
		case s.keyHasToken(k):
			s.unpaceKey(k)
			s.review(h.q)
		default:
			s.hintKey(k)
		}
		return
	}
	if q := h.q; q.paced {
		s.review(q)
		if q.paced {
			s.hintQueue(q)
		}
	}
}

// hintQueue says to look at q, paced, when its bucket holds a token.
func (s *Scheduler[W]) hintQueue(q *Queue[W]) {
	heap.Push(&s.hints, hint[W]{at: q.rate.readyAt(q.tat), q: q})
}

// hintKey says to look at k, paced, when its bucket holds a token.
func (s *Scheduler[W]) hintKey(k *Key[W]) {
	heap.Push(&s.hints, hint[W]{at: k.queue.keyRate.readyAt(k.tat), q: k.queue, k: k})
}

// NextStart returns when the next task that a rate holds back may start,
// if one is: the loop wakes then.
func (s *Scheduler[W]) NextStart() (int64, bool) {
	for len(s.hints) > 0 && !s.live(s.hints[0]) {
		heap.Pop(&s.hints)
	}
	at, ok := int64(0), false
	if len(s.hints) > 0 {
		at, ok = s.hints[0].at, true
	}
	if s.turns.Len() > 0 && !s.poolHasToken() {
		if t := s.rate.readyAt(s.tat); !ok || t < at {
			at, ok = t, true
		}
	}
	return at, ok
}

// live reports whether what h names still waits for a token, until h's
// time: else a later hint names it, or nothing need wake the loop.
func (s *Scheduler[W]) live(h hint[W]) bool {
	if k := h.k; k != nil {
		return k.queue == h.q && k.paced && k.queue.keyRate.readyAt(k.tat) == h.at
	}
	return h.q.paced && h.q.rate.readyAt(h.q.tat) == h.at
}

// Paced returns how many tasks wait in q that a rate holds back: all that
// no busy key or limit holds, while q's rate (or the pool's) has no token,
// and those of keys waiting for theirs.
func (s *Scheduler[W]) Paced(q *Queue[W]) int {
	if q.paced || q.inTurns && !s.poolHasToken() {
		return q.waiting - (q.held - q.heldPaced)
	}
	return q.heldPaced
}

// PacedAll returns how many tasks wait that a rate holds back, in every
// queue.
func (s *Scheduler[W]) PacedAll() int {
	n := 0
	for q := range s.turns.Iter() {
		n += s.Paced(q)
	}
	for _, q := range s.aside {
		n += s.Paced(q)
	}
	return n
}

// PoolRated reports whether the pool has a rate: then every task the loop
// hands out goes through the scheduler, for its token.
func (s *Scheduler[W]) PoolRated() bool { return !s.rate.None() }

// NeedsTime reports whether the scheduler needs to be told the time before
// it answers: a rate may hold a waiting task back, or one of q's (q may be
// nil), which the loop asks about. Without a rate it never does.
func (s *Scheduler[W]) NeedsTime(q *Queue[W]) bool {
	return !s.rate.None() || s.ratedWaiting > 0 || s.resters > 0 || q != nil && q.rated()
}

// SetRate sets the pool's rate (the zero Rate: none). The bucket keeps the
// whole tokens it holds, up to the new burst; a full bucket, or a new
// rate's, starts full.
func (s *Scheduler[W]) SetRate(r Rate) {
	s.tat = reshape(s.rate, r, s.tat, s.clock)
	s.rate = r
}

// SetQueueRate sets q's rate (the zero Rate: none), as SetRate does.
func (s *Scheduler[W]) SetQueueRate(q *Queue[W], r Rate) {
	was := q.rated()
	q.tat = reshape(q.rate, r, q.tat, s.clock)
	q.rate = r
	s.recount(q, was)
	s.review(q)
	if q.paced {
		s.hintQueue(q) // its bucket changed shape
	}
}

// SetKeyRate sets the rate of each key of q (the zero Rate: none), as
// SetRate does for each.
func (s *Scheduler[W]) SetKeyRate(q *Queue[W], r Rate) {
	was := q.rated()
	old := q.keyRate
	q.keyRate = r
	for _, k := range q.keys {
		k.tat = reshape(old, r, k.tat, s.clock)
		switch {
		case k.paced && s.keyHasToken(k):
			s.unpaceKey(k)
		case !k.paced && !k.busy && k.fns.len() > 0 && !s.keyHasToken(k):
			k.unready()
			s.paceKey(k)
		case k.paced:
			s.hintKey(k) // its bucket changed shape
		}
		switch {
		case !k.resting:
		case s.keyFull(k):
			k.resting = false
			s.resters--
			q.forget(k, &s.free)
		default:
			heap.Push(&s.resting, hint[W]{at: k.tat, q: k.queue, k: k})
		}
	}
	s.recount(q, was)
	s.review(q)
}

// reshape returns the tat of a bucket changed from shape from to to.
func reshape(from, to Rate, tat, now int64) int64 {
	switch {
	case to.None():
		return 0
	case from.None():
		return now // full
	}
	return from.reshape(to, tat, now)
}

// recount counts q's waiting tasks among those a rate may hold back if q
// has a rate now, and not if it had one before (was) but no longer.
func (s *Scheduler[W]) recount(q *Queue[W], was bool) {
	switch is := q.rated(); {
	case is && !was:
		s.ratedWaiting += q.waiting
	case was && !is:
		s.ratedWaiting -= q.waiting
	}
}

// paceKey holds k, which is free and has a waiting task, until its bucket
// holds a token; k is in no ready heap.
func (s *Scheduler[W]) paceKey(k *Key[W]) {
	k.paced = true
	s.npaced++
	n := k.fns.len()
	k.queue.held += n
	k.queue.heldPaced += n
	s.hintKey(k)
}

// unpaceKey lets k's next task start: its bucket holds a token.
func (s *Scheduler[W]) unpaceKey(k *Key[W]) {
	k.paced = false
	s.npaced--
	n := k.fns.len()
	k.queue.held -= n
	k.queue.heldPaced -= n
	k.ready()
}

// rest keeps k, which has no task waiting or running, until its bucket is
// full again: a task with its key meanwhile finds it as it was left.
func (s *Scheduler[W]) rest(k *Key[W]) {
	k.resting = true
	s.resters++
	heap.Push(&s.resting, hint[W]{at: k.tat, q: k.queue, k: k})
}

// A hint says to look at a queue (k nil) or key again at a time: when its
// bucket may hold a token, or be full. Hints are not taken out when what
// they name changes: the scheduler checks, when their time comes.
type hint[W any] struct {
	at int64
	q  *Queue[W]
	k  *Key[W]
}

// hints is a heap of hints, earliest first.
type hints[W any] []hint[W]

func (h hints[W]) Len() int           { return len(h) }
func (h hints[W]) Less(i, j int) bool { return h[i].at < h[j].at }
func (h hints[W]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hints[W]) Push(x any)        { *h = append(*h, x.(hint[W])) }
func (h *hints[W]) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = hint[W]{}
	*h = old[:len(old)-1]
	return x
}
