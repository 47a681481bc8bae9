package workerpool

import "slices"

// The hand-off buffer: Pool.work's buffer. It lets a worker that comes free
// take its next task while the dispatcher is busy or not even scheduled:
// without it, every queued task needs the dispatcher and the worker to
// meet, and when tasks are short the workers wait for the dispatcher.
//
// The buffer holds only tasks the scheduler handed out, in order, but they
// are out of the dispatcher's hands: whatever must keep them from starting
// takes them back first. A pause, a resize, a sub-pool's stop, and a task
// of another lane that must wait for its turn, put them back in their
// lanes. Stop and a passed Shutdown deadline drop them, and so do the
// workers that take one concurrently, past the cut: sent after the first
// task Stop took back.
//
// While more than one lane has waiting tasks, the buffer holds at most one,
// so that lanes take their turns when workers come free, not when the
// buffer was filled.

// handOffBuffer is the capacity of the hand-off buffer: how many waiting
// tasks workers can take without waiting for the dispatcher. It is bounded
// by WithMaxWaiting, as buffered tasks wait too.
const handOffBuffer = 64

// What the dispatcher wants of the workers, in Pool.wants. A worker loads
// it once per task; it is 0 in the common case.
const (
	wantIdle   = 1 << iota // signal the end of every task: a Pause, or a task held back by a busy key, waits for them
	wantTaken              // signal every task taken from the hand-off buffer
	wantEnds               // signal after reporting the end of a task
	wantRetire             // exit after a task if there are more workers than the maximum
	watchLate              // drop a task received after a Shutdown deadline or past the cut
)

// A cutoff is where Stop, or a passed Shutdown deadline, cut the tasks sent
// on Pool.work. The dispatcher publishes it (Pool.cut) and sets watchLate
// before it takes the hand-off buffer back, then sets sent to that of the
// first task it took back and closes done. A worker that sees watchLate
// after receiving a task waits for done and drops the task if it was sent
// at or past the cut: the worker took it, concurrently, after the
// dispatcher took an earlier one. A worker that received its task before
// watchLate was set received it before the take-back began, so it was sent
// before the cut. Either way, of the tasks in the buffer when Stop cut it,
// those that start are exactly those sent before the cut.
type cutoff struct {
	sent uint64   // written before done is closed
	late []uint64 // for Pool.revoked: the sends to hand back; written before done is closed
	done chan struct{}
}

// place hands e, a task of sub-pool sub (nil: the pool's own) that may
// start, to a parked worker, else to a new worker if there are fewer than
// the maximum, else to the hand-off buffer if it may take it (see
// bufferTakes), and reports whether it did.
func (d *dispatcher) place(e entry, sub *Subpool) bool {
	h := handOff{kind: runTask, entry: e, sub: sub, sent: d.sent + 1}
	if len(d.p.work) == 0 {
		// A worker may be parked: a send goes to it if one is. If none
		// is, the task lands in the buffer, alone; then take it back for a
		// new worker, unless a worker came free and took it meanwhile.
		select {
		case d.p.work <- h:
			if len(d.p.work) > 0 && d.workers() < d.max {
				select {
				case h = <-d.p.work:
					d.start(h)
					return true
				default:
				}
			}
			d.sentOne(e.lane, true)
			return true
		default:
		}
	}
	if d.workers() < d.max {
		d.start(h)
		return true
	}
	if !d.bufferTakes(e.lane) {
		return false
	}
	select {
	case d.p.work <- h:
		d.sentOne(e.lane, false)
		return true
	default:
		return false
	}
}

// bufferTakes reports whether the hand-off buffer may take a task of lane l:
// if it is empty, or if it holds tasks of l alone and no other lane has
// waiting tasks.
func (d *dispatcher) bufferTakes(l *lane) bool {
	return len(d.p.work) == 0 || !d.bufMixed && d.bufLane == l && d.sched.lanesWaiting() <= 1
}

// sentOne counts a task of lane l sent on Pool.work; alone says the buffer
// held nothing before it.
func (d *dispatcher) sentOne(l *lane, alone bool) {
	d.sent++
	d.handed++
	d.unplaced = 0
	switch {
	case alone || d.bufLane == nil: // nil: nothing sent since the buffer was taken back
		d.bufLane, d.bufMixed = l, false
	case d.bufLane != l:
		d.bufMixed = true
	}
}

// takeBack empties the hand-off buffer and returns the tasks that were in
// it, in the order they were sent. A worker may take one at the same time;
// it then runs, as if handed out just before.
func (d *dispatcher) takeBack() []handOff {
	var back []handOff
	for len(d.p.work) > 0 {
		select {
		case h := <-d.p.work:
			back = append(back, h)
			d.handed--
		default:
		}
	}
	d.bufLane, d.bufMixed = nil, false
	return back
}

// requeue takes the hand-off buffer back and puts its tasks back at the
// front of their lanes, to be handed out again.
//
// Workers may take tasks from the buffer meanwhile. One that takes a task
// sent before the first the dispatcher took runs it, as handed out just
// before; one sent after it would start ahead of a task taken back, out
// of order. So requeue revokes those (Pool.revoked): it publishes the
// revocation and sets watchLate before it takes the first task back, then
// lists every later send it did not get, the late ones, and closes done.
// A worker that receives a task waits for done and hands a late one back
// (returnedReport). Until every late task has come back, the tasks taken
// back wait in limbo and nothing is handed out; then they all go back to
// their lanes, in the order they were sent.
func (d *dispatcher) requeue() {
	if len(d.p.work) > 0 {
		d.requeueExcept(nil)
	}
}

// requeueExcept is requeue, but returns the tasks of lane l it took back,
// in order, rather than putting them back: a sub-pool's Stop drops them.
func (d *dispatcher) requeueExcept(l *lane) (kept []handOff) {
	cut := &cutoff{done: make(chan struct{})}
	d.p.revoked.Store(cut)
	d.updateWants() // watchLate, before the first receive
	back := d.takeBack()
	for i, h := range back {
		if h.kind != runTask {
			continue
		}
		// Every send after the first one taken back, up to the last
		// send, that is not taken back was taken by a worker.
		next := d.sent + 1
		for _, later := range back[i+1:] {
			if later.kind == runTask {
				next = later.sent
				break
			}
		}
		for s := h.sent + 1; s < next; s++ {
			d.late = append(d.late, s)
		}
		if l != nil && h.lane == l {
			kept = append(kept, h)
		} else {
			d.limbo = append(d.limbo, h.entry)
		}
	}
	cut.late = slices.Clone(d.late)
	close(cut.done)
	d.settleLimbo()
	return kept
}

// settleLimbo puts the tasks in limbo back in their lanes once no late
// task is still to come back, and ends the revocation.
func (d *dispatcher) settleLimbo() {
	if len(d.late) > 0 {
		return
	}
	if d.p.revoked.Load() != nil {
		d.p.revoked.Store(nil)
		d.updateWants()
	}
	if len(d.limbo) > 0 {
		slices.SortFunc(d.limbo, bySeq)
		d.sched.putBack(d.limbo)
		clear(d.limbo)
		d.limbo = d.limbo[:0]
		d.publishWaiting()
	}
}

// cameBack accounts for h, a task a worker handed back unstarted (a late
// one, see requeue), or dropped past a cut: it is no longer late.
func (d *dispatcher) cameBack(h handOff) {
	if i := slices.Index(d.late, h.sent); i >= 0 {
		d.late = slices.Delete(d.late, i, i+1)
	}
}

// cutBuffer takes the hand-off buffer back for good, for Stop or a passed
// Shutdown deadline, and returns its tasks. Workers drop the tasks they
// take concurrently, sent after the first task it took back. The first cut is the one
// that counts: nothing is sent on Pool.work after it.
func (d *dispatcher) cutBuffer() []handOff {
	if d.p.cut.Load() != nil {
		return d.takeBack() // cut once already: the buffer is empty
	}
	cut := &cutoff{sent: ^uint64(0), done: make(chan struct{})}
	d.p.cut.Store(cut)
	d.updateWants() // watchLate, before the first receive
	back := d.takeBack()
	if len(back) > 0 {
		cut.sent = back[0].sent
	}
	close(cut.done)
	return back
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
		return // tasks wait in the buffer, so no worker is parked
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
// claimed, and counted busy, before the worker runs.
func (d *dispatcher) start(h handOff) {
	w := new(worker)
	if h.kind == runTask && h.w != nil && !h.w.claim() {
		// Its submitter gave up on it: the new worker starts without it.
		if h.mustReport() {
			d.p.reports.add(report{kind: endedReport, handOff: h})
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
	d.all = append(d.all, w)
	d.publishWorkers()
	d.clock.run(d.p, d.workers() > d.cfg().minWorkers)
	d.p.startWorker(w, h)
}
