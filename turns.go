package workerpool

import "slices"

// Turns. Every lane with waiting tasks is in the dispatcher's ring, in the
// order of their turns. The next task to hand out comes from the first lane
// in the ring that may start one (a sub-pool at its limit may not), which
// then goes to the back of the ring: lanes take turns, round robin, and a
// lane skipped because of its limit keeps its place for when a task of its
// ends. Within a lane, its unkeyed tasks and its keys take turns (see
// lane.front).
//
// Fair turns are decided when a task is handed out, so once the pool has a
// sub-pool, the dispatcher hands out a task only when the hand-off buffer
// is empty: when a worker comes free, it takes the task chosen when the one
// before was taken. Without sub-pools, there is no one to be fair to but
// the pool's own keys, and the buffer fills as usual (see deep).

// laneOf returns the lane a submitted task belongs to.
func (d *dispatcher) laneOf(t job) *lane {
	if t.lane != nil {
		return t.lane
	}
	return &d.own
}

// deep reports whether the hand-off buffer may hold more than one task:
// only while the pool has no sub-pool and at most one lane has waiting
// tasks. With sub-pools, a task may come to one at any time, and must not
// find many tasks of other lanes handed out ahead of its turn.
func (d *dispatcher) deep() bool { return !d.subpools && len(d.ring) <= 1 }

// wait puts t, a task of lane l that may not be handed out now, in l (in
// its key's line if it has one), and l in the ring.
func (d *dispatcher) wait(l *lane, t job) {
	if t.line != nil {
		t.line.tasks.PushBack(t.fn)
		if !t.line.out && t.line.tasks.Len() == 1 {
			l.ready.PushBack(t.line)
		}
		l.waiting++
	} else {
		l.push(t)
	}
	d.waiting++
	d.enterRing(l)
	d.setWaiting()
}

// enterRing puts l, which has waiting tasks, at the back of the ring, if it
// is not in it. A second lane with waiting tasks ends the deep buffer: the
// tasks in it go back to their lanes, to be handed out in turns.
func (d *dispatcher) enterRing(l *lane) {
	if l.inRing {
		return
	}
	if len(d.p.work) > 0 && len(d.ring) <= 1 && (d.bufMixed || d.bufLane != l) {
		// The buffer holds tasks handed out while no other lane waited:
		// they go back to their lanes, which keep their turn before l's.
		// (While lanes take turns, it holds one task, chosen in turn.)
		d.requeue(d.takeBack())
	}
	l.inRing = true
	d.ring = append(d.ring, l)
}

// offer returns the task to hand out next, ready to send, and records where
// it comes from for commit. It reports false if no lane may start one.
func (d *dispatcher) offer() (job, bool) {
	for i, l := range d.ring {
		if !l.startable() {
			continue
		}
		t, line := l.front()
		if l == &d.own {
			t.lane = nil // the pool's own tasks need no report when they end
		}
		t.seq = d.sent + 1
		d.offered, d.offeredLine, d.offeredAt = l, line, i
		d.askForEnd(line)
		return t, true
	}
	return job{}, false
}

// commit counts the task offer returned as handed out: it leaves its lane,
// which goes to the back of the ring if it still has waiting tasks.
func (d *dispatcher) commit() {
	l, i := d.offered, d.offeredAt
	l.pop(d.offeredLine)
	d.out(l, d.offeredLine)
	d.waiting--
	d.ring = slices.Delete(d.ring, i, i+1)
	if l.waiting > 0 {
		d.ring = append(d.ring, l)
	} else {
		l.inRing = false
	}
	d.setWaiting()
}

// out counts a task of lane l handed out, against l's limit, and, if it is
// keyed (line), asks workers to report its end: before the task is sent,
// so that its worker sees the request.
func (d *dispatcher) out(l *lane, line *keyLine) {
	if line != nil {
		line.out = true
		d.linesOut++
	}
	if l.sub != nil {
		l.running++
		if !l.busyListed {
			l.busyListed = true
			d.busy = append(d.busy, l)
		}
	}
	d.askForEnd(line)
}

// in takes back what out counted, for a task that was not sent after all.
func (d *dispatcher) in(l *lane, line *keyLine) {
	if line != nil {
		line.out = false
		d.linesOut--
	}
	if l.sub != nil {
		l.running--
	}
}

// askForEnd asks workers to report the end of a task with key line (nil:
// none), if it is keyed: before the task is sent, so that its worker sees
// the request. A sub-pool's tasks need no such request: a worker counts
// their ends in its stats, which the dispatcher reads when it looks at
// the lane (see endsMatter).
func (d *dispatcher) askForEnd(line *keyLine) {
	if line != nil && d.wants&wantEnds == 0 {
		d.wants |= wantEnds
		d.p.wants.Store(d.wants)
	}
}

// requeue puts tasks taken back from the hand-off buffer at the front of
// their lanes, in order, and their lanes at the front of the ring, with the
// turn within each lane as it was: the next offer hands them out again
// first, as if they had never left.
func (d *dispatcher) requeue(back []job) {
	for _, t := range slices.Backward(back) {
		l := d.laneOf(t)
		if t.line != nil {
			t.line.out = false
			d.linesOut--
			t.line.tasks.PushFront(t.fn)
			l.ready.PushFront(t.line)
			l.waiting++
		} else {
			l.pushFront(t)
		}
		l.keyTurn = t.line != nil
		if l.sub != nil {
			l.running--
		}
		d.waiting++
		if l.inRing {
			d.ring = slices.DeleteFunc(d.ring, func(x *lane) bool { return x == l })
		}
		l.inRing = true
		d.ring = slices.Insert(d.ring, 0, l)
	}
	d.setWaiting()
}

// seeEnds takes note of the keyed and sub-pool tasks that workers ended: a
// key whose task ended may go again, or costs nothing if none of its tasks
// waits; a sub-pool has room under its limit. Then it hands out what may
// start now.
func (d *dispatcher) seeEnds() {
	for line := d.p.ended.Swap(nil); line != nil; {
		next := line.next
		line.next = nil
		line.out = false
		d.linesOut--
		l := line.lane
		if line.tasks.Len() > 0 {
			l.ready.PushBack(line)
		} else {
			l.forget(line, &d.freeLines)
		}
		line = next
	}
	d.countEnds()
	d.fill()
}

// countEnds brings the sub-pools' counts of tasks out up to date with the
// ends their workers counted, answers the stops of those now idle, and
// reports whether any task ended since it last looked.
func (d *dispatcher) countEnds() (ended bool) {
	busy := d.busy[:0]
	for _, l := range d.busy {
		ended = l.countEnded() || ended
		if l.running > 0 {
			busy = append(busy, l)
		} else {
			l.busyListed = false
			d.settleStops(l)
		}
	}
	clear(d.busy[len(busy):])
	d.busy = busy
	return ended
}

// endsMatter reports whether the end of a sub-pool's task would let the
// dispatcher do something: start a task the sub-pool's limit holds up, or
// answer its Stop or StopWait. Only then do workers signal those ends
// (wantEnds); otherwise the dispatcher counts them when it next looks at
// the lane. The counts it looks at may be stale, but only ever high, so a
// lane that seems at its limit turns wantEnds on, and the loop then counts
// again (see run), catching the ends that came before the workers were
// asked to signal them.
func (d *dispatcher) endsMatter() bool {
	for _, l := range d.busy {
		if len(l.stops) > 0 || l.waiting > 0 && l.running >= l.limit {
			return true
		}
	}
	return false
}

// drop empties lane l for a stop: it returns its fire-and-forget tasks, the
// unkeyed ones in order, then each key's in order, tells its waiters
// ErrStopped, and takes l out of the ring; n is how many tasks it dropped,
// waiters' included.
func (d *dispatcher) drop(l *lane) (tasks []func(), n int) {
	n = l.waiting
	for fn := range l.tasks.IterPopFront() {
		if fn == nil {
			l.waiters.PopFront().finish(ErrStopped)
		} else {
			tasks = append(tasks, fn)
		}
	}
	l.ready.Clear()
	lines := make([]*keyLine, 0, len(l.keys))
	for _, line := range l.keys {
		lines = append(lines, line)
	}
	for _, line := range lines {
		for fn := range line.tasks.IterPopFront() {
			tasks = append(tasks, fn)
		}
		if !line.out {
			l.forget(line, &d.freeLines)
		}
	}
	l.waiting = 0
	d.waiting -= n
	if l.sub != nil {
		l.stats.abandoned.Add(uint64(n))
	}
	if l.inRing {
		l.inRing = false
		d.ring = slices.DeleteFunc(d.ring, func(x *lane) bool { return x == l })
	}
	return tasks, n
}
