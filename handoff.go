package workerpool

import "slices"

// Hand-offs: how a task the dispatcher hands out reaches a worker, and how
// the dispatcher takes it back if it must.
//
// Workers wait for tasks on Pool.work. A send goes to the worker parked
// longest, if one is; else into the channel's small buffer, the hand-off
// buffer, where the next worker to come free takes it without waiting for
// the dispatcher, which short tasks would otherwise keep waiting. A task
// in the buffer carries a claim (claim.go), so that the dispatcher can take
// it back (for a pause, a stop, a turn, a call that gives up) until a
// worker claims it. Which tasks may wait there is the scheduler's rule
// (aheadRule), and one of the loop's: none while a Shutdown deadline is
// watched (see ahead).

// What the dispatcher wants of the workers, in Pool.wants. A worker loads
// it once per task; it is 0 in the common case.
const (
	wantIdle     = 1 << iota // signal the end of every task: a Pause, or a task that may go only to a free worker, waits for one
	wantReceipts             // signal every hand-off received, claimed or revoked: something waits for room in the buffer, or for claims
	wantEnds                 // signal after reporting the end of a task
	wantRetire               // exit after a task if there are more workers than the maximum
)

// handOffBuffer is the capacity of the hand-off buffer: how many waiting
// tasks workers can take without waiting for the dispatcher. It is bounded
// by WithMaxWaiting, as buffered tasks wait too.
const handOffBuffer = 64

// A handOff is what a worker receives on Pool.work: a task to run, with
// its claim and what the worker reports when it ends, or the word to exit.
type handOff struct {
	kind handOffKind
	entry
	sub   *Subpool // the task's sub-pool, nil for the pool's own
	claim *claim   // nil for a worker's first task, which needs none
	sent  uint64   // the send's number, from 1; what claim holds while pending
}

type handOffKind uint8

const (
	noTask  handOffKind = iota // a worker started without a first task
	runTask                    // run the task, once claimed
	quit                       // exit: an idle worker is reaped, or the maximum fell
)

// mustReport reports whether the end of the task must be reported to the
// dispatcher: a sub-pool's task (its limit, its stop) or a keyed one (its
// key).
func (h *handOff) mustReport() bool { return h.sub != nil || h.line != nil }

// place hands e, a task that may start, to a worker: to a parked one, else
// to a new one if there are fewer than the maximum, else to the hand-off
// buffer if the scheduler lets e wait there (ahead: how many may) or a
// worker is free to take it at once. It reports whether it did.
//
// Only a task that waits in the buffer needs a claim. When the buffer is
// empty, a worker may be parked: the task goes without one, as if handed
// over directly. If it lands in the buffer instead, no worker was parked,
// and the buffer held nothing else: the dispatcher takes it back, for a new
// worker or to send it again with a claim, unless a worker came free and
// took it meanwhile.
func (d *dispatcher) place(e entry, ahead int) bool {
	if !d.placeable(e.lane, ahead) {
		return false
	}
	h := handOff{kind: runTask, entry: e, sub: d.subpool(e.lane)}
	below := d.workers() < d.max
	if len(d.p.work) > 0 {
		if below {
			d.start(h) // no worker is parked while the buffer holds anything
			return true
		}
		return d.buffer(h)
	}
	d.p.work <- h // the buffer is empty, and only the dispatcher sends
	if len(d.p.work) > 0 {
		select {
		case h = <-d.p.work:
			if below {
				d.start(h)
				return true
			}
			return d.buffer(h)
		default:
		}
	}
	// A worker received it: every hand-off sent before it has too.
	d.out.reached = d.out.sent
	d.handed++
	d.unplaced = 0
	return true
}

// buffer sends h to the hand-off buffer with a claim, and reports whether
// it had room.
func (d *dispatcher) buffer(h handOff) bool {
	h = d.out.next(h)
	select {
	case d.p.work <- h:
		d.sentOne(h)
		return true
	default:
		return false // full of revoked hand-offs
	}
}

// placeable reports whether place would hand out now a task of lane l
// that may wait in the hand-off buffer while fewer than ahead do. When the
// buffer is full, it may not: the loop offers the task to the buffer in
// its select instead, or waits for workers to take what is there.
func (d *dispatcher) placeable(l *lane, ahead int) bool {
	switch {
	case d.workers() < d.max:
		return true
	case len(d.p.work) == cap(d.p.work):
		return false
	case len(d.p.work) == 0 && ahead > 0:
		return true // a parked worker takes it, or it waits alone
	}
	return d.mayBuffer(l, ahead)
}

// mayBuffer reports whether the hand-off buffer, which holds something,
// may take one more task of lane l: one that may wait there ahead of the
// workers while fewer than ahead do, or that a free worker takes at once.
// Behind another lane's tasks, it waits for its turn (see wait).
func (d *dispatcher) mayBuffer(l *lane, ahead int) bool {
	switch {
	case ahead == 0:
		return d.spareWorker()
	case !d.out.allOf(l):
		return false
	case ahead > 1:
		return true // the channel's capacity bounds it
	}
	return d.buffered() < ahead
}

// sentOne counts h, with its claim, as sent on Pool.work.
func (d *dispatcher) sentOne(h handOff) {
	d.out.commit(h)
	d.handed++
	d.unplaced = 0
}

// spareWorker reports whether a worker is free: not busy, not in a panic
// handler or a task observer, nor about to report a keyed task's end, and
// no pending hand-off waits for it. The loop reads the workers' counts
// before it takes their reports, so a worker counted free here has its
// report, if any, in.
func (d *dispatcher) spareWorker() bool {
	done, occupied := d.crew.tasksAndOccupied()
	return d.handed-done+uint64(occupied) < uint64(d.workers())
}

// recall revokes the pending hand-offs of the lanes that which selects
// (nil: all) and puts their tasks back in their lanes, in order, to be
// handed out again.
func (d *dispatcher) recall(which func(*lane) bool) {
	entries := d.revoke(which)
	if len(entries) > 0 {
		d.sched.putBack(entries)
		d.publishWaiting()
	}
	clear(entries)
}

// dropHandOffs revokes the pending hand-offs of the lanes that which
// selects (nil: all) and returns their tasks, in send order, no longer
// running: a stop drops them.
func (d *dispatcher) dropHandOffs(which func(*lane) bool) []entry {
	entries := d.revoke(which)
	for _, e := range entries {
		d.sched.ended(e) // it was out
	}
	dropped := slices.Clone(entries)
	clear(entries) // the scratch keeps no task
	return dropped
}

// revoke revokes the pending hand-offs of the lanes that which selects,
// uncounts them, and returns their tasks in send order, in a slice that
// the next call reuses. Its caller publishes the tasks in hand once it has
// put them back or dropped them.
func (d *dispatcher) revoke(which func(*lane) bool) []entry {
	back := d.out.revoke(which, d.back[:0])
	entries := d.backEntries[:0]
	for _, h := range back {
		entries = append(entries, h.entry)
	}
	if len(back) > 0 {
		d.handed -= uint64(len(back))
		d.clearBuffer()
	}
	clear(back)
	d.back, d.backEntries = back[:0], entries[:0]
	return entries
}

// clearBuffer empties the hand-off buffer if every hand-off in it has been
// revoked, so that it has room again at once; else the workers would drop
// them one by one as they come free, and a bounded queue would wait.
func (d *dispatcher) clearBuffer() {
	if d.out.inBuffer() {
		return // a live hand-off may be there, which only a worker may take
	}
	for len(d.p.work) > 0 {
		select {
		case <-d.p.work:
		default:
			return // workers took the rest
		}
	}
}

// quitParked tells up to n parked workers, longest parked first, to exit,
// leaving at least floor workers: fewer if fewer are parked. A send goes to
// a parked worker if one is; if none is, the quit lands in the hand-off
// buffer, and is taken back: it would go to the next worker to come free,
// not an idle one.
//
// Busy workers may retire meanwhile, counting themselves out; should one
// take the count to floor after a quit was sent, a new worker replaces the
// one that quits.
func (d *dispatcher) quitParked(n, floor int) {
	if len(d.p.work) > 0 {
		return // the buffer holds hand-offs, so no worker is parked
	}
	for range n {
		if d.workers() <= floor || !d.sendQuit() {
			return
		}
		d.quits++
		if !d.p.stats.countOutAbove(floor) {
			d.p.stats.countOut() // the worker that quits ...
			d.start(handOff{})   // ... and the one in its place
			return
		}
	}
}

// sendQuit sends a quit to a parked worker, and reports whether one took it.
func (d *dispatcher) sendQuit() bool {
	select {
	case d.p.work <- handOff{kind: quit}:
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

// start starts a worker goroutine whose first task is h, if it is one:
// counted busy before the worker runs.
func (d *dispatcher) start(h handOff) {
	w := new(worker)
	if h.kind == runTask && h.w != nil && !h.w.take() {
		// Its submitter gave up on it: the new worker starts without it.
		// The scheduler has yet to count it running: it hears of its end
		// as a report.
		if h.mustReport() {
			d.p.reports.add(h.entry)
		}
		h = handOff{}
	}
	if h.kind == runTask {
		d.handed++
		d.unplaced = 0
		w.phase.Store(1) // busy with h: Status shows it at once
		if h.sub != nil {
			h.sub.stats.started.Add(1)
		}
	} else {
		w.since.Store(d.p.tick.Load() + 1)
	}
	// Count it before Status can see it busy: Busy <= Workers.
	d.p.stats.countIn()
	d.crew.add(w)
	d.publishWorkers()
	d.clock.run(d.p, d.workers() > d.cfg().minWorkers)
	d.p.startWorker(w, h)
}

// collect takes the workers' reports and tells the scheduler, and reports
// whether there were any.
func (d *dispatcher) collect() bool {
	if d.sched.reported == 0 {
		return false
	}
	got := d.p.reports.take(d.got)
	for _, e := range got {
		d.sched.ended(e)
	}
	clear(got)
	d.got = got[:0]
	if cap(got) > maxReuse {
		d.got = nil // a burst of reports: let it go
	}
	if len(got) > 0 {
		d.settleStops()
	}
	return len(got) > 0
}

// updateWants sets p.wants from what the loop waits for: what it needs the
// workers to tell it.
func (d *dispatcher) updateWants() {
	wants := d.nextWaitsFor()
	if d.pauseAck != nil {
		wants |= wantIdle
	}
	if (d.draining || !d.room()) && d.out.pending() > 0 {
		wants |= wantReceipts // to finish; for a submitter waiting for room
	}
	if d.sched.reported > 0 || len(d.stops) > 0 {
		// The ends of sub-pools' and keyed tasks free places and keys,
		// and their reports hold the tasks until the loop takes them.
		wants |= wantEnds
	}
	if d.workers() > d.max {
		wants |= wantRetire
	}
	if wants != d.wants {
		d.wants = wants
		d.p.wants.Store(wants)
	}
}

// nextWaitsFor returns what the workers must signal for the next task the
// scheduler would hand out to go, if fill could not hand it out: a worker
// that comes free (wantIdle), if it may go only to a free worker; a
// hand-off taken from the buffer (wantReceipts), if it may wait there only
// alone, or not behind another lane's tasks, or if the buffer is full (of
// revoked hand-offs, maybe). A task that may wait in the buffer is
// offered to it in the select instead.
func (d *dispatcher) nextWaitsFor() uint32 {
	if !d.canFill() || d.workers() < d.max {
		return 0 // nothing to hand out, or fill starts a worker
	}
	e, ok := d.sched.peek()
	if !ok {
		return 0
	}
	var wants uint32
	ahead := d.ahead(e.lane)
	if ahead == 0 {
		wants |= wantIdle
	}
	if len(d.p.work) > 0 && (ahead <= 1 || !d.out.allOf(e.lane)) {
		wants |= wantReceipts
	}
	return wants
}

// offer returns the task to offer on Pool.work in the select, and whether
// there is one: the next task that may start, if it may wait in the
// hand-off buffer, which is full. The send succeeds as soon as a worker
// makes room.
func (d *dispatcher) offer() (handOff, bool) {
	if !d.canFill() || d.workers() != d.max {
		// Nothing to hand out; or fill starts workers; or surplus workers
		// are leaving, and fill weighs each hand-out against the tasks
		// running.
		return handOff{}, false
	}
	e, ok := d.sched.peek()
	if !ok || d.ahead(e.lane) <= 1 || !d.out.allOf(e.lane) {
		return handOff{}, false // fill hands it out when it may go
	}
	return d.out.next(handOff{kind: runTask, entry: e, sub: d.subpool(e.lane)}), true
}

// ahead returns how many tasks of lane l may wait in the hand-off buffer
// ahead of the workers, as the scheduler rules. While a Shutdown deadline
// is watched, none may: a task goes only to a free worker, so that no
// task waits where a worker could take it once the deadline has passed.
func (d *dispatcher) ahead(l *lane) int {
	if d.deadline != nil {
		return 0
	}
	switch d.sched.ahead(l) {
	case noneAhead:
		return 0
	case oneAhead:
		return 1
	}
	return cap(d.p.work)
}
