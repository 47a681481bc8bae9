package workerpool

import (
	"slices"
)

// The scheduler decides which waiting task starts next, and what a stop
// drops. It is plain data: the dispatcher's loop asks it ("may this task
// start now?", "what goes next?", "this task ended", "drop this lane") and
// acts on its answers. It never waits, sends, reads a clock or calls back.
//
// Its rules:
//   - Within a lane (the pool's own queue, or a sub-pool's), tasks go in the
//     order the pool accepted them, except that a task whose key is busy
//     (a task with its key is running) waits until that task ends; the
//     other tasks, keyed or not, do not wait for it.
//   - Lanes take turns, round robin: the next task comes from the first
//     lane in the ring that has a task that may start, and that lane goes
//     to the back of the ring. A lane at its limit is passed over, and
//     keeps its place for when one of its tasks ends.
//   - A stop drops waiting tasks in the one order the pool accepted them,
//     whatever their lanes and keys.
//   - How many of a lane's tasks may wait in the hand-off buffer ahead of
//     the workers (ahead): as many as it holds while one lane has waiting
//     tasks; one while several do, so that they take turns as workers come
//     free, not as the buffer fills; none while a busy key holds back one
//     of the lane's tasks, so that once its key is free it finds no later
//     task of its lane ahead of it.

// A scheduler holds every waiting task, in lanes, and counts the running
// ones. The zero scheduler is not ready: use newScheduler.
type scheduler struct {
	own lane // the pool's own lane
	// ring lists the lanes with waiting tasks, in the order of their turns.
	ring []*lane
	// waiting counts the tasks waiting in every lane.
	waiting int
	// reported counts the running tasks whose end the loop must report:
	// keyed ones and sub-pools' ones.
	reported int
	// seq is the seq of the last task admitted.
	seq uint64
	// max is the pool's maximum of workers: a lane's limit at or above it
	// holds nothing back.
	max int
	// next is the lane and task that peek chose, for take; nil once taken
	// or changed.
	next *lane
	// gone holds the seqs of unkeyed tasks taken back by their submitters
	// that are still in their lane's fifo, behind its first
	// task: they are dropped as they reach its front.
	gone map[uint64]struct{}
	free []*keyLine // unused key lines, to reuse
}

func newScheduler(max int) *scheduler {
	return &scheduler{max: max}
}

// admit numbers t, a task accepted for lane l (nil: the pool's own), with
// key if keyed, accepted at the time accepted (0: not timed), and returns its
// entry. The entry is not yet anywhere: start
// it or wait it.
func (s *scheduler) admit(t task, l *lane, key string, keyed bool, accepted int64) entry {
	if l == nil {
		l = &s.own
	}
	e := entry{task: t, lane: l, seq: s.nextSeq(), accepted: accepted}
	if keyed {
		e.line = l.line(key, &s.free)
	}
	return e
}

// nextSeq numbers a task accepted for the pool's own lane, unkeyed, that
// may start at once: admit without the entry.
func (s *scheduler) nextSeq() uint64 {
	s.seq++
	return s.seq
}

// startsNow reports whether e, just admitted, may start at once: no task
// waits anywhere, its lane is under its limit and its key is free.
func (s *scheduler) startsNow(e entry) bool {
	return s.waiting == 0 && e.lane.underLimit(s.max) && (e.line == nil || !e.line.busy)
}

// start counts e as running: handed to a worker (or on its way to one) and
// not ended. Every started entry is later passed to ended or putBack.
func (s *scheduler) start(e entry) {
	e.lane.running++
	if line := e.line; line != nil {
		line.busy = true
		e.lane.held += line.tasks.Len()
	}
	if s.mustReport(e) {
		s.reported++
	}
}

// mustReport reports whether the scheduler must be told when e ends: a
// keyed task frees its key, and a sub-pool's task a place under its limit.
func (s *scheduler) mustReport(e entry) bool { return e.line != nil || e.lane != &s.own }

// wait puts e, which may not start now, behind the waiting tasks of its
// lane, and the lane in the ring.
func (s *scheduler) wait(e entry) {
	s.next = nil
	e.lane.push(e)
	s.waiting++
	if !e.lane.inRing {
		e.lane.inRing = true
		s.ring = append(s.ring, e.lane)
	}
}

// peek returns the task to hand out next, if any may start: the first one
// in the turn of the first lane in the ring that has one. It changes
// nothing; take hands it out.
func (s *scheduler) peek() (entry, bool) {
	for _, l := range s.ring {
		if l.mayStart(s.max) {
			s.next = l
			return l.first(), true
		}
	}
	s.next = nil
	return entry{}, false
}

// take removes the task that peek returned, starts it, and sends its
// lane to the back of the ring, or out of it if nothing else waits there.
func (s *scheduler) take() entry {
	l := s.next
	s.next = nil
	e := l.first()
	l.remove(e)
	s.dropGone(l)
	s.waiting--
	s.start(e)
	i := slices.Index(s.ring, l)
	s.ring = slices.Delete(s.ring, i, i+1)
	if l.waiting > 0 {
		s.ring = append(s.ring, l)
	} else {
		l.inRing = false
	}
	return e
}

// ended counts e, a started task, as no longer running: it ran, or it was
// dropped without running. Its lane has room under its limit again, and
// its key's next task may start.
func (s *scheduler) ended(e entry) {
	s.next = nil
	s.unstart(e)
	if e.line != nil {
		e.lane.keyEnded(e.line, &s.free)
	}
}

// unstart undoes what start counted.
func (s *scheduler) unstart(e entry) {
	e.lane.running--
	if s.mustReport(e) {
		s.reported--
	}
}

// left counts e, a started task that its submitter gave up on before a
// worker took it, as ended, and gives its lane back the turn e took: e
// never ran, as if it had never been handed out.
func (s *scheduler) left(e entry) {
	s.ended(e)
	if l := e.lane; l.inRing {
		i := slices.Index(s.ring, l)
		s.ring = slices.Delete(s.ring, i, i+1)
		s.ring = slices.Insert(s.ring, 0, l)
	}
}

// putBack returns tasks that were started but never reached a worker,
// listed in the order they were handed out, to the front of their lanes,
// and their lanes to the front of the ring: they are handed out again
// first, as if they had never left.
func (s *scheduler) putBack(tasks []entry) {
	s.next = nil
	for _, e := range slices.Backward(tasks) {
		l := e.lane
		s.unstart(e)
		l.pushFront(e)
		s.waiting++
		if l.inRing {
			i := slices.Index(s.ring, l)
			s.ring = slices.Delete(s.ring, i, i+1)
		}
		l.inRing = true
		s.ring = slices.Insert(s.ring, 0, l)
	}
}

// dropAll removes every waiting task, of every lane, and returns them in
// the order the pool accepted them.
func (s *scheduler) dropAll() []entry {
	var tasks []entry
	for _, l := range s.ring {
		tasks = s.drain(tasks, l)
	}
	s.ring = s.ring[:0]
	slices.SortFunc(tasks, bySeq)
	return tasks
}

// dropLane removes every waiting task of l and returns them in the order
// the pool accepted them.
func (s *scheduler) dropLane(l *lane) []entry {
	if !l.inRing {
		return nil
	}
	tasks := s.drain(nil, l)
	i := slices.Index(s.ring, l)
	s.ring = slices.Delete(s.ring, i, i+1)
	slices.SortFunc(tasks, bySeq)
	return tasks
}

func (s *scheduler) drain(tasks []entry, l *lane) []entry {
	s.next = nil
	s.waiting -= l.waiting
	l.inRing = false
	n := len(tasks)
	tasks = l.drain(tasks, &s.free)
	if len(s.gone) == 0 {
		return tasks
	}
	kept := tasks[:n]
	for _, e := range tasks[n:] {
		if _, gone := s.gone[e.seq]; gone && e.line == nil {
			delete(s.gone, e.seq) // given up on: neither run nor dropped
			continue
		}
		kept = append(kept, e)
	}
	return kept
}

// cancel removes the unkeyed task numbered seq from lane l, if it waits
// there, and reports whether it did. Its submitter gave up on it: it never
// runs, and a stop does not return it.
func (s *scheduler) cancel(l *lane, seq uint64) bool {
	if _, gone := s.gone[seq]; gone || !l.fifo.holds(seq) {
		return false
	}
	s.next = nil
	if s.gone == nil {
		s.gone = make(map[uint64]struct{})
	}
	s.gone[seq] = struct{}{}
	l.waiting--
	s.waiting--
	s.dropGone(l)
	if l.waiting == 0 && l.inRing {
		l.inRing = false
		i := slices.Index(s.ring, l)
		s.ring = slices.Delete(s.ring, i, i+1)
	}
	return true
}

// dropGone drops the tasks at the front of l's fifo whose submitters gave
// up on them, so that its first task is one that may run.
func (s *scheduler) dropGone(l *lane) {
	for len(s.gone) > 0 && l.fifo.len() > 0 {
		seq := l.fifo.firstSeq()
		if _, gone := s.gone[seq]; !gone {
			return
		}
		delete(s.gone, seq)
		l.fifo.popFront()
	}
}

// bySeq orders entries as the pool accepted them.
func bySeq(a, b entry) int {
	switch {
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

// setMax records the pool's new maximum of workers.
func (s *scheduler) setMax(n int) {
	s.next = nil
	s.max = n
}

// setLimit sets l's limit.
func (s *scheduler) setLimit(l *lane, limit int) {
	s.next = nil
	l.limit = limit
}

// idle reports whether l has no task waiting or running.
func (s *scheduler) idle(l *lane) bool { return l.waiting == 0 && l.running == 0 }

// An aheadRule says how many of a lane's tasks may wait in the hand-off
// buffer, ahead of the workers, rather than go only to a free worker.
type aheadRule uint8

const (
	noneAhead aheadRule = iota // only to a free worker
	oneAhead                   // one at a time
	fillAhead                  // as many as the buffer holds
)

// ahead returns how many of l's tasks may wait in the hand-off buffer.
func (s *scheduler) ahead(l *lane) aheadRule {
	switch {
	case l.held > 0:
		return noneAhead
	case len(s.ring) > 1:
		return oneAhead
	}
	return fillAhead
}

// lanesWaiting returns how many lanes have waiting tasks.
func (s *scheduler) lanesWaiting() int { return len(s.ring) }
