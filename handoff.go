package workerpool

import (
	"slices"
	"sync/atomic"
)

// Hand-offs: how a task the dispatcher hands out reaches a worker, and how
// the dispatcher takes it back.
//
// Workers wait for tasks on Pool.work. A send goes to the worker parked
// longest, if one is; else into the channel's buffer (the hand-off
// buffer), where the next worker to come free takes it without waiting for
// the dispatcher. What travels is a hand-off: a slot of a fixed ring,
// which holds the task, and the send's number.
//
// A slot's word holds the send's number while the hand-off is pending. The
// worker that receives it claims it with one compare-and-swap and takes
// the task out; the dispatcher takes it back by revoking it, with another.
// Exactly one of the two wins:
//   - a worker whose claim fails drops the hand-off and tells nobody: the
//     dispatcher revoked it, and holds the task again;
//   - the dispatcher revokes newest first, and stops at the first hand-off
//     a worker has claimed: Pool.work is first in, first out, so every
//     earlier one has reached a worker, which will claim it. So what it
//     takes back of a queue is always the queue's latest hand-offs, and
//     the started tasks of every queue are a prefix of those it accepted.
//
// A slot is reused once its hand-off is claimed or revoked. A worker that
// receives a revoked hand-off late compares the word with the hand-off's
// own number, which no later send reuses, so its claim fails even if the
// slot holds another hand-off by then. The ring has room for twice the
// buffer; a slot still pending when the ring comes round to it (its worker
// was descheduled between its receive and its claim) is skipped, with its
// number.

// A handOff is what travels on Pool.work: a slot and the send's number.
// With no slot, it tells the worker that receives it to exit: a quit,
// which the dispatcher counted out as it sent it to an idle worker; or,
// with n set to retire, a retirement, which the worker counts out itself,
// if the pool has more workers than its maximum, as it may take it only
// once its task has ended.
type handOff struct {
	slot *slot
	n    uint64
}

// retire is the n of a retirement.
const retire = 1

// A slot holds a hand-off's task while it is pending, with what the worker
// needs to run it and report its end. It has a cache line of its own: the
// dispatcher and a worker write it for every task, and neighbours would
// slow each other down.
type slot struct {
	// word is the send's number while the hand-off is pending; claimed,
	// taking or revoked once it is not.
	word atomic.Uint64
	// What the worker takes out when it claims the hand-off. The dispatcher
	// writes it before the send and reads it once it has revoked the
	// hand-off; the worker reads it, and clears it, between winning its
	// claim and storing claimed.
	task     task
	lane     *lane
	line     *keyLine
	accepted int64
	_        [cacheLine - 56]byte
}

// The words of a slot that holds no pending hand-off. Send numbers start
// at 1 and never reach them.
const (
	claimed = 0              // a worker claimed it and took its task
	taking  = ^uint64(0) - 1 // a worker is claiming it: it has won, and takes its task
	revoked = ^uint64(0)     // the dispatcher took it back, or has not used it yet
)

// claim claims the hand-off numbered n for the calling worker, and returns
// its task; false if the dispatcher revoked it first.
func (s *slot) claim(n uint64) (entry, bool) {
	if !s.word.CompareAndSwap(n, taking) {
		return entry{}, false
	}
	e := entry{task: s.task, lane: s.lane, line: s.line, accepted: s.accepted}
	s.task, s.lane, s.line = task{}, nil, nil // the slot keeps no task's closure
	s.word.Store(claimed)
	return e, true
}

// handOffs is the dispatcher's record of what it sent on Pool.work: the
// ring of slots and, beside each, what it last sent in it. Plain data,
// owned by the dispatcher.
type handOffs struct {
	slots []*slot // made on the first hand-off, each on its cache line
	sends []send  // sends[i] is about slots[i]
	// last is the number of the last send; reached the latest one such
	// that none up to it can be taken back: each was claimed or revoked,
	// or reached a worker that will claim it.
	last, reached uint64
	// ready is the hand-off that prepare readied and that is not yet
	// sent, if ready.slot is not nil, and readyLane its task's lane: once
	// sent, its slot is the worker's to read and clear.
	ready     handOff
	readyLane *lane
	// lane is the lane of the last send, and laneFrom the number of the
	// first of the sends of that lane in a row that ends with it.
	lane     *lane
	laneFrom uint64
}

// A send is the dispatcher's record of the last hand-off in a slot: its
// number, its task's lane and seq, and the turn its lane took for it. The
// dispatcher reads its record, never the slot's task, which is the
// worker's once sent, unless it has revoked the hand-off.
type send struct {
	n, seq uint64
	lane   *lane
	turn   int64
}

// init makes a ring of twice size slots, at least 2.
func (o *handOffs) init(size int) {
	n := 2
	for n < 2*size {
		n *= 2
	}
	o.slots = make([]*slot, n)
	for i := range o.slots {
		o.slots[i] = new(slot)
		o.slots[i].word.Store(revoked)
	}
	o.sends = make([]send, n)
}

// prepare readies the hand-off of e, which took turn, in the next free
// slot, and returns it. Until commit, the send has not happened: unprepare
// undoes it. If every slot is pending, the ring doubles: workers woken by
// a hand-off, but not yet run, hold theirs, and with thousands of workers on
// a few processors there can be many.
func (o *handOffs) prepare(e entry, turn int64) handOff {
	for {
		mask := uint64(len(o.slots) - 1)
		for n := o.last + 1; n <= o.last+uint64(len(o.slots)); n++ {
			i := n & mask
			s := o.slots[i]
			w := s.word.Load()
			if w != claimed && w != revoked {
				continue // still pending, long after its send: skip its number
			}
			if r := &o.sends[i]; w == claimed && r.n > o.reached {
				// Its record goes: keep what it says, that its hand-off and
				// every earlier one reached workers, which revoke must know.
				o.reached = r.n
			}
			s.task, s.lane, s.line, s.accepted = e.task, e.lane, e.line, e.accepted
			o.sends[i] = send{n: n, seq: e.seq, lane: e.lane, turn: turn}
			s.word.Store(n)
			o.ready, o.readyLane = handOff{slot: s, n: n}, e.lane
			return o.ready
		}
		o.grow()
	}
}

// grow doubles the ring. A slot whose record says it was last sent with
// number n moves to n's place in the new ring, which no other takes: two
// numbers apart by less than the old ring's size are apart in the new one.
func (o *handOffs) grow() {
	size := 2 * len(o.slots)
	slots, sends := make([]*slot, size), make([]send, size)
	for i, s := range o.slots {
		j := uint64(i)
		if n := o.sends[i].n; n != 0 {
			j = n & uint64(size-1)
		}
		slots[j], sends[j] = s, o.sends[i]
	}
	for i := range slots {
		if slots[i] == nil {
			slots[i] = new(slot)
			slots[i].word.Store(revoked)
		}
	}
	o.slots, o.sends = slots, sends
}

// commit records the readied hand-off as sent.
func (o *handOffs) commit() {
	h, l := o.ready, o.readyLane
	o.ready, o.readyLane = handOff{}, nil
	if o.lane != l {
		o.lane, o.laneFrom = l, h.n
	}
	o.last = h.n
}

// unprepare undoes prepare, the send not having happened: the slot holds
// no task again.
func (o *handOffs) unprepare() {
	if s := o.ready.slot; s != nil {
		s.word.Store(revoked)
		s.task, s.lane, s.line = task{}, nil, nil
		o.ready, o.readyLane = handOff{}, nil
	}
}

// at returns the slot and the record of the send numbered n, or false if
// no hand-off was sent with that number (it was skipped).
func (o *handOffs) at(n uint64) (*slot, *send, bool) {
	i := n & uint64(len(o.slots)-1)
	if o.sends[i].n != n {
		return nil, nil, false
	}
	return o.slots[i], &o.sends[i], true
}

// allOf reports whether every hand-off that may still be taken back is of
// lane l.
func (o *handOffs) allOf(l *lane) bool {
	if o.reached == o.last || o.lane == l && o.laneFrom <= o.reached+1 {
		return true
	}
	o.pending() // moves reached past those resolved
	return o.reached == o.last || o.lane == l && o.laneFrom <= o.reached+1
}

// pendingFrom calls visit on the hand-offs that may be pending, sent after
// reached, newest first, until it returns false: on each whose number has
// a record, with its slot and record. Numbers are visited one by one while
// fewer than the ring's slots were sent after reached; else, a pending
// hand-off holding reached back for long, the ring's records are sorted.
func (o *handOffs) pendingFrom(visit func(n uint64, s *slot, r *send) bool) {
	if o.last-o.reached <= uint64(len(o.slots)) {
		for n := o.last; n > o.reached; n-- {
			if s, r, ok := o.at(n); ok && !visit(n, s, r) {
				return
			}
		}
		return
	}
	var ns []uint64
	for i := range o.slots {
		if n := o.sends[i].n; n > o.reached {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	for _, n := range slices.Backward(ns) {
		if s, r, ok := o.at(n); ok && !visit(n, s, r) {
			return
		}
	}
}

// pending returns how many hand-offs are pending: sent, and neither
// claimed nor revoked. It moves reached past the resolved ones at the
// bottom.
func (o *handOffs) pending() int {
	n, low := 0, o.last
	o.pendingFrom(func(i uint64, s *slot, r *send) bool {
		if s.word.Load() == r.n {
			n++
			low = i - 1
		}
		return true
	})
	o.reached = max(o.reached, low) // none up to low is pending
	return n
}

// revoke takes back, newest first, the pending hand-offs that which
// selects (nil: all), until it meets one that a worker has claimed: that
// one and every earlier one have reached workers and will start. It
// appends their tasks to back, and their turns to turns, in send order.
func (o *handOffs) revoke(which func(*send) bool, back []entry, turns []int64) ([]entry, []int64) {
	first := len(back)
	o.pendingFrom(func(n uint64, s *slot, r *send) bool {
		w := s.word.Load()
		switch {
		case w == revoked:
			return true
		case w != n:
			o.reached = n // claimed, or being claimed
			return false
		case which != nil && !which(r):
			return true
		case !s.word.CompareAndSwap(n, revoked):
			o.reached = n // claimed meanwhile
			return false
		}
		back = append(back, entry{task: s.task, lane: s.lane, line: s.line, seq: r.seq, accepted: s.accepted})
		turns = append(turns, r.turn)
		s.task, s.lane, s.line = task{}, nil, nil
		return true
	})
	// Newest first: reverse what this call added into send order.
	for i, j := first, len(back)-1; i < j; i, j = i+1, j-1 {
		back[i], back[j] = back[j], back[i]
		turns[i], turns[j] = turns[j], turns[i]
	}
	return back, turns
}

// revokeOne takes back the pending hand-off of the task numbered seq of
// lane l, if no worker has claimed it, and returns its task and turn: its
// submitter gave up on it. One task that leaves does not change the order
// of the others, so it may be taken back even if a later one has started.
func (o *handOffs) revokeOne(l *lane, seq uint64) (e entry, turn int64, ok bool) {
	o.pendingFrom(func(n uint64, s *slot, r *send) bool {
		if r.seq != seq || r.lane != l || s.word.Load() != n {
			return true
		}
		if s.word.CompareAndSwap(n, revoked) {
			e, turn, ok = entry{task: s.task, lane: s.lane, line: s.line, seq: r.seq, accepted: s.accepted}, r.turn, true
			s.task, s.lane, s.line = task{}, nil, nil
		}
		return false
	})
	return e, turn, ok
}

// first returns the number of the first pending hand-off that which
// selects, or 0 if none is pending.
func (o *handOffs) first(which func(*send) bool) uint64 {
	first := uint64(0)
	o.pendingFrom(func(n uint64, s *slot, r *send) bool {
		if s.word.Load() == n && which(r) {
			first = n
		}
		return true
	})
	return first
}

// resolved reports whether every hand-off sent is claimed or revoked.
func (o *handOffs) resolved() bool { return o.pending() == 0 }

// The loop's side: handing tasks out, offering the next to a full buffer,
// recalling, quits.

// handOffBuffer is the most the hand-off buffer holds: how many waiting
// tasks workers can take without waiting for the dispatcher. It is
// bounded by WithMaxWaiting, as buffered tasks wait too.
const handOffBuffer = 64

// handOut hands e, a task that may start and took turn, to a worker: to a
// parked one, else to a new one if there are fewer than the maximum, else
// to the buffer if it has room. It reports whether it did.
//
// While the maximum has fallen and surplus workers are owed retirements,
// no task goes out until they are in the buffer, ahead of it: a surplus
// worker takes its retirement before any task.
//
// A new worker's first task has no slot: it cannot be taken back. So it
// takes e only if no earlier hand-off of e's lane is pending, which a
// recall might take back while e runs: else it starts without a task,
// takes the buffer's first hand-off, and e goes to the buffer, behind the
// others of its lane.
func (d *dispatcher) handOut(e entry, turn int64) bool {
	if d.owedRetires > 0 {
		if d.sendRetirements(); d.owedRetires > 0 {
			return false // no task goes ahead of a retirement: more would run than the maximum
		}
	}
	if d.working() < d.max {
		if len(d.p.work) == 0 && d.toParked(e, turn) {
			return true
		}
		if d.out.first(func(s *send) bool { return s.lane == e.lane }) == 0 {
			d.start(e, true) // no worker is parked while the buffer holds anything
			return true
		}
		d.start(entry{}, false)
	}
	return d.toBuffer(e, turn)
}

// toBuffer sends e to Pool.work, if it has room, and reports whether it
// did.
func (d *dispatcher) toBuffer(e entry, turn int64) bool {
	h := d.out.prepare(e, turn)
	empty := len(d.p.work) == 0
	select {
	case d.p.work <- h:
		d.sent(e.lane)
		if empty && len(d.p.work) == 0 {
			d.reached(h)
		}
		return true
	default:
		d.out.unprepare()
		return false
	}
}

// reached records that h, sent to an empty buffer that is still empty,
// has reached a worker, which will start it, and so has every hand-off
// sent before it: none of them can be taken back any more. So a task that
// went to a free worker starts, whatever happens next.
func (d *dispatcher) reached(h handOff) { d.out.reached = max(d.out.reached, h.n) }

// toParked sends e to a parked worker, if one is, and reports whether it
// did. The buffer is empty, so the send cannot block: if the hand-off
// lands in the buffer, no worker was parked, and the loop takes it back,
// unless a worker came free and took it meanwhile.
func (d *dispatcher) toParked(e entry, turn int64) bool {
	h := d.out.prepare(e, turn)
	d.p.work <- h
	if len(d.p.work) > 0 {
		select {
		case <-d.p.work: // h: the buffer held nothing else
			d.out.unprepare()
			return false
		default: // a worker took it meanwhile
		}
	}
	d.sent(e.lane)
	d.reached(h)
	return true
}

// sent counts the hand-off that prepare readied as sent.
func (d *dispatcher) sent(l *lane) {
	d.out.commit()
	d.handed++
	l.handed++
}

// start starts a worker goroutine whose first task is e, if first is set,
// counted busy before the worker runs: Status shows it at once. If e's
// submitter gave up on it, the worker starts without it, having skipped
// it, as a worker that receives such a task does.
func (d *dispatcher) start(e entry, first bool) {
	w := new(worker)
	if first {
		d.handed++
		e.lane.handed++
		if e.w != nil && !e.w.take() {
			w.skipped.Store(1)
			d.skipped(e)
			first = false
		} else {
			w.phase.Store(1)
			if sub := subpoolOf(e.lane); sub != nil {
				sub.stats.started.Add(1)
			}
		}
	}
	if !first {
		w.since.Store(d.p.tick.Load() + 1)
	}
	// Count it before Status can see it busy: Busy <= Workers.
	d.p.stats.countIn()
	d.crew.add(w)
	d.publishWorkers()
	d.clock.run(d.p, d.workers() > d.cfg().minWorkers)
	d.p.startWorker(w, e, first, false)
}

// skipped accounts for e, a task handed out that will not run: its
// submitter gave up on it. It is Canceled, and its end is reported, as the
// scheduler counts it running.
func (d *dispatcher) skipped(e entry) {
	d.p.noteCanceled(e.w, e.lane)
	if sub := subpoolOf(e.lane); sub != nil {
		sub.stats.skipped.Add(1)
	}
	if e.mustReport() {
		d.p.reports.add(report{lane: e.lane, line: e.line, ended: true})
	}
}

// offerable returns the task that the loop would offer the buffer, if
// there is one: the next task, if it may wait in the buffer and every
// worker is started. The buffer is full, unless a worker took a hand-off
// since fill looked: either way the send goes as soon as there is room.
func (d *dispatcher) offerable() (entry, bool) {
	if d.paused || d.dropping || d.sched.waiting == 0 || d.working() < d.max {
		return entry{}, false
	}
	e, ok := d.sched.peek()
	if !ok || !d.mayBuffer(e.lane) {
		return entry{}, false
	}
	return e, true
}

// offer returns the hand-off to offer Pool.work in the select, and whether
// there is one: a retirement owed to a surplus worker, or the next task,
// if it may wait in the buffer. The send succeeds as soon as there is
// room.
func (d *dispatcher) offer() (handOff, bool) {
	if d.owedRetires > 0 {
		return handOff{n: retire}, true
	}
	e, ok := d.offerable()
	if !ok {
		return handOff{}, false
	}
	return d.out.prepare(e, e.lane.turn), true
}

// sentOffer accounts for h, the hand-off that the select sent.
func (d *dispatcher) sentOffer(h handOff) {
	if h.slot == nil {
		d.owedRetires--
		return
	}
	e := d.sched.take()
	d.sent(e.lane)
	d.unplaced = 0
	d.publishInHand()
}

// recall revokes the pending hand-offs from the one numbered from (0:
// all) and puts their tasks back in their lanes, in order, with the turns
// they took, to be handed out again. What it takes back is always every
// hand-off after the first it takes back, whatever its lane: so each
// lane's tasks out stay the first it accepted, and the turns keep their
// order.
func (d *dispatcher) recall(from uint64) {
	entries, turns := d.revoke(func(s *send) bool { return s.n >= from })
	if len(entries) > 0 {
		d.sched.putBack(entries, turns)
		d.publishInHand()
	}
	clear(entries)
}

// recallLane recalls the pending hand-offs of lane l and every later one.
func (d *dispatcher) recallLane(l *lane) {
	if first := d.out.first(func(s *send) bool { return s.lane == l }); first != 0 {
		d.recall(first)
	}
}

// recallAfter recalls the pending hand-offs that took a turn after turn,
// and every later one.
func (d *dispatcher) recallAfter(turn int64) {
	if first := d.out.first(func(s *send) bool { return s.turn > turn }); first != 0 {
		d.recall(first)
	}
}

// dropHandOffs revokes the pending hand-offs of the lanes that which
// selects (nil: all) and returns their tasks, in send order, no longer
// running: a stop drops them.
func (d *dispatcher) dropHandOffs(which func(*send) bool) []entry {
	entries, _ := d.revoke(which)
	for _, e := range entries {
		d.sched.ended(e) // it was out
	}
	dropped := append([]entry(nil), entries...)
	clear(entries) // the scratch keeps no task
	return dropped
}

// revoke revokes the pending hand-offs that which selects, uncounts them,
// and returns their tasks and turns in send order, in slices that the
// next call reuses.
func (d *dispatcher) revoke(which func(*send) bool) ([]entry, []int64) {
	back, turns := d.out.revoke(which, d.back[:0], d.turns[:0])
	for _, e := range back {
		d.handed--
		e.lane.handed--
	}
	if len(back) > 0 {
		d.clearBuffer()
	}
	d.back, d.turns = back[:0], turns[:0]
	return back, turns
}

// clearBuffer empties the hand-off buffer if no hand-off in it is pending,
// so that it has room again at once; else the workers would drop the
// revoked ones one by one as they come free, and a bounded queue would
// wait. Retirements it holds are owed again.
func (d *dispatcher) clearBuffer() {
	if len(d.p.work) == 0 || d.out.pending() > 0 {
		return // a pending hand-off may be there, which only a worker may take
	}
	for len(d.p.work) > 0 {
		select {
		case h := <-d.p.work:
			if h.slot == nil {
				d.owedRetires++
			}
		default:
			return // workers took the rest
		}
	}
}

// freeWorkers returns how many workers are free to take a task at once:
// neither busy nor in the panic handler or the task observer, less those
// that the hand-offs not yet taken wait for.
func (d *dispatcher) freeWorkers() int {
	done, occupied := d.crew.tasksAndOccupied()
	return max(d.workers()-int(d.handed-done)-occupied, 0)
}

// sendRetirements sends the retirements owed to surplus workers that fit
// in the buffer, and reports whether it sent any.
func (d *dispatcher) sendRetirements() bool {
	did := false
	for d.owedRetires > 0 {
		select {
		case d.p.work <- handOff{n: retire}:
			d.owedRetires--
			did = true
		default:
			return did
		}
	}
	return did
}

// quitParked tells up to n parked workers, longest parked first, to exit,
// leaving at least floor workers: fewer if fewer are parked. A send goes to
// a parked worker if one is; if none is, the quit lands in the hand-off
// buffer, and is taken back: it would go to the next worker to come free,
// not an idle one.
func (d *dispatcher) quitParked(n, floor int) {
	if len(d.p.work) > 0 {
		return // the buffer holds hand-offs, so no worker is parked
	}
	for range n {
		if d.workers() <= floor || !d.sendQuit() {
			return
		}
		d.quits++
		d.p.stats.countOut()
	}
}

// sendQuit sends a quit to a parked worker, and reports whether one took it.
func (d *dispatcher) sendQuit() bool {
	select {
	case d.p.work <- handOff{}:
	default:
		return false
	}
	if len(d.p.work) > 0 {
		select {
		case <-d.p.work:
			return false // no worker was parked
		default: // a worker took it meanwhile
		}
	}
	return true
}

// collect takes the workers' reports and tells the scheduler, and reports
// whether there were any.
func (d *dispatcher) collect() bool {
	if d.p.reports.n.Load() == 0 {
		return false
	}
	got := d.p.reports.take(d.got)
	for _, r := range got {
		if r.skipped != nil {
			d.p.noteCanceled(r.skipped, r.lane)
		}
		if r.ended {
			d.sched.ended(entry{lane: r.lane, line: r.line})
		}
	}
	clear(got)
	d.got = got[:0]
	if cap(got) > maxReuse {
		d.got = nil // a burst of reports: let it go
	}
	return len(got) > 0
}
