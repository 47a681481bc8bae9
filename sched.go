package workerpool

import (
	"slices"

	"github.com/gammazero/deque"
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
//   - Lanes take turns, round robin. Each lane with waiting tasks has a
//     turn, a number: the next task comes from the lane with the lowest
//     turn among those with a task that may start, and that lane's next
//     turn is after every other's. A lane at its limit, or whose waiting
//     tasks all wait for busy keys, is passed over and keeps its turn, so
//     that once one of its tasks ends it goes first.
//   - A task handed out and taken back before it started goes back to the
//     front of its lane, and its lane to the turn it had when the task was
//     taken: as if it had never left.
//   - A stop drops waiting tasks in the one order the pool accepted them,
//     whatever their lanes and keys.
//
// Turns cost the same however many lanes there are: the lanes that may
// start wait in a deque in the order of their turns, and those passed over
// wait aside, until a task's end lets them go back in.

// A scheduler holds every waiting task, in lanes, and counts the running
// ones. The zero scheduler is not ready: use newScheduler.
type scheduler struct {
	own lane // the pool's own lane
	// turns lists the lanes with a task that may start, lowest turn first;
	// aside lists the lanes with waiting tasks none of which may start.
	turns deque.Deque[*lane]
	aside []*lane
	// back is the turn the next lane to the back of the turns gets.
	back int64
	// rejoined says that a lane passed over went back into the turns since
	// the loop last looked, and lowJoin is the lowest turn such a lane had:
	// the hand-offs that took later turns were handed out before it.
	rejoined bool
	lowJoin  int64
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
	// gone holds the seqs of unkeyed tasks taken back by their submitters
	// that are still in their lane's fifo, behind its first
	// task: they are dropped as they reach its front.
	gone map[uint64]struct{}
	free []*keyLine // unused key lines, to reuse
}

func newScheduler(max int) *scheduler {
	return &scheduler{max: max, back: 1}
}

// admit numbers t, a task accepted for lane l (nil: the pool's own), with
// key if keyed, accepted at the time accepted (0: not timed), and returns
// its entry. The entry is not yet anywhere: start it or wait it.
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
// not ended. Every started entry is later passed to ended, left or
// putBack.
func (s *scheduler) start(e entry) {
	e.lane.running++
	if line := e.line; line != nil {
		line.busy = true
		e.lane.held += line.fns.Len()
	}
	if e.mustReport() {
		s.reported++
	}
}

// wait puts e, which may not start now, behind the waiting tasks of its
// lane. A lane that had none gets the last turn.
func (s *scheduler) wait(e entry) {
	l := e.lane
	s.waiting++
	if l.waiting > 0 {
		l.push(e)
		s.review(l)
		return
	}
	l.turn = s.nextTurn()
	l.push(e)
	s.enter(l)
}

// stuck reports whether tasks wait but none may start: each waits for a
// place under its lane's limit, or for its key.
func (s *scheduler) stuck() bool { return s.waiting > 0 && s.turns.Len() == 0 }

// peek returns the task to hand out next, if any may start: the first one
// of the lane whose turn it is. It changes nothing; take hands it out.
func (s *scheduler) peek() (entry, bool) {
	if s.turns.Len() == 0 {
		return entry{}, false
	}
	return s.turns.Front().first(), true
}

// take removes the task that peek returned, starts it, and gives its lane
// the last turn. The turn it took was its lane's before the call.
func (s *scheduler) take() entry {
	l := s.turns.PopFront()
	l.inTurns = false
	e := l.first()
	l.remove(e)
	s.dropGone(l)
	s.waiting--
	s.start(e)
	l.turn = s.nextTurn()
	s.enter(l)
	return e
}

// nextTurn returns the last turn: after every turn given so far. A task
// handed out without waiting takes one too, so that if it comes back it
// goes where it would have waited.
func (s *scheduler) nextTurn() int64 {
	s.back++
	return s.back - 1
}

// ended counts e, a started task, as no longer running: it ran, or it was
// dropped without running. Its lane has room under its limit again, and
// its key's next task may start.
func (s *scheduler) ended(e entry) {
	s.unstart(e)
	if e.line != nil {
		e.lane.keyEnded(e.line, &s.free)
	}
	s.review(e.lane)
}

// unstart undoes what start counted.
func (s *scheduler) unstart(e entry) {
	e.lane.running--
	if e.mustReport() {
		s.reported--
	}
}

// left counts e, a started task that its submitter gave up on before a
// worker took it, as ended, and gives its lane back the turn e took: e
// never ran, as if it had never been handed out.
func (s *scheduler) left(e entry, turn int64) {
	s.ended(e)
	s.rewind(e.lane, turn)
}

// putBack returns tasks that were started but never reached a worker,
// listed in the order they were handed out with the turns they took, to
// the front of their lanes, and gives each lane back the first turn its
// tasks took: they are handed out again first, as if they had never left.
func (s *scheduler) putBack(tasks []entry, turns []int64) {
	for i, e := range slices.Backward(tasks) {
		l := e.lane
		s.unstart(e)
		s.leave(l)
		if l.waiting == 0 || turns[i] < l.turn {
			l.turn = turns[i]
		}
		l.pushFront(e)
		s.waiting++
		s.enter(l)
	}
}

// rewind gives l, if it has waiting tasks, turn if that is earlier than
// its own. A lane that may start and goes back in the turns is one the
// loop hears of (rejoined), as review says.
func (s *scheduler) rewind(l *lane, turn int64) {
	if l.waiting == 0 || l.turn <= turn {
		return
	}
	s.leave(l)
	l.turn = turn
	s.enter(l)
	if l.inTurns {
		s.noteRejoin(l)
	}
}

// enter puts l, whose tasks or counts changed, where it belongs: in the
// turns, at its turn, if a task of it may start; aside if it has waiting
// tasks and none may; nowhere if it has none. It must not be in either.
func (s *scheduler) enter(l *lane) {
	switch {
	case l.waiting == 0:
	case !l.mayStart(s.max):
		s.aside = append(s.aside, l)
		l.asideAt = len(s.aside) // 1 + its index

	default:
		l.inTurns = true
		if s.turns.Len() == 0 || s.turns.Back().turn < l.turn {
			s.turns.PushBack(l) // the common case: the last turn
			return
		}
		s.turns.Insert(s.turnIndex(l.turn), l)
	}
}

// leave takes l out of the turns or from aside, wherever enter put it.
func (s *scheduler) leave(l *lane) {
	switch {
	case l.inTurns:
		l.inTurns = false
		if s.turns.Front() == l {
			s.turns.PopFront()
			return
		}
		s.turns.Remove(s.turnIndex(l.turn))
	case l.asideAt > 0:
		last := s.aside[len(s.aside)-1]
		s.aside[l.asideAt-1], last.asideAt = last, l.asideAt
		s.aside[len(s.aside)-1] = nil
		s.aside = s.aside[:len(s.aside)-1]
		l.asideAt = 0
	}
}

// turnIndex returns the index in the turns of the first lane whose turn is
// not below turn.
func (s *scheduler) turnIndex(turn int64) int {
	i, j := 0, s.turns.Len()
	for i < j {
		h := int(uint(i+j) >> 1)
		if s.turns.At(h).turn < turn {
			i = h + 1
		} else {
			j = h
		}
	}
	return i
}

// review moves l between the turns and aside if whether a task of it may
// start has changed. A lane that goes back into the turns keeps its turn,
// and the loop hears of it (rejoined).
func (s *scheduler) review(l *lane) {
	if l.inTurns == (l.waiting > 0 && l.mayStart(s.max)) {
		return
	}
	s.leave(l)
	s.enter(l)
	if l.inTurns {
		s.noteRejoin(l)
	}
}

// noteRejoin records that l went back into the turns, at its turn.
func (s *scheduler) noteRejoin(l *lane) {
	if !s.rejoined || l.turn < s.lowJoin {
		s.lowJoin = l.turn
	}
	s.rejoined = true
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// dropAll removes every waiting task, of every lane, and returns them in
// the order the pool accepted them.
func (s *scheduler) dropAll() []entry {
	var tasks []entry
	for s.turns.Len() > 0 {
		l := s.turns.PopFront()
		l.inTurns = false
		tasks = s.drain(tasks, l)
	}
	for _, l := range s.aside {
		l.asideAt = 0
		tasks = s.drain(tasks, l)
	}
	clear(s.aside)
	s.aside = s.aside[:0]
	slices.SortFunc(tasks, bySeq)
	return tasks
}

// dropLane removes every waiting task of l and returns them in the order
// the pool accepted them.
func (s *scheduler) dropLane(l *lane) []entry {
	if l.waiting == 0 {
		return nil
	}
	s.leave(l)
	tasks := s.drain(nil, l)
	slices.SortFunc(tasks, bySeq)
	return tasks
}

func (s *scheduler) drain(tasks []entry, l *lane) []entry {
	s.waiting -= l.waiting
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

// cancel removes the task numbered seq, an unkeyed one of lane l, if it
// waits there, and reports whether it did. Its submitter gave up on it: it
// never runs, and a stop does not return it.
func (s *scheduler) cancel(l *lane, seq uint64) bool {
	if _, gone := s.gone[seq]; gone || !l.fifo.holds(seq) {
		return false
	}
	if s.gone == nil {
		s.gone = make(map[uint64]struct{})
	}
	s.leave(l)
	s.gone[seq] = struct{}{}
	l.waiting--
	s.waiting--
	s.dropGone(l)
	s.enter(l)
	return true
}

// dropGone drops the tasks at the front of l's fifo whose submitters gave
// up on them, so that its first task is one that may run.
func (s *scheduler) dropGone(l *lane) {
	for len(s.gone) > 0 && l.fifo.len() > 0 {
		seq, _ := l.fifo.frontSeq()
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

// setMax records the pool's new maximum of workers, which may let lanes
// at their limits start tasks, or hold them back.
func (s *scheduler) setMax(n int) {
	s.max = n
	lanes := slices.Clone(s.aside)
	for l := range s.turns.Iter() {
		lanes = append(lanes, l)
	}
	for _, l := range lanes {
		s.review(l)
	}
}

// setLimit sets l's limit.
func (s *scheduler) setLimit(l *lane, limit int) {
	l.limit = limit
	s.review(l)
}

// idle reports whether l has no task waiting or running.
func (s *scheduler) idle(l *lane) bool { return l.waiting == 0 && l.running == 0 }

// mayBuffer reports whether l's tasks may wait in the hand-off buffer,
// ahead of the workers: not while a busy key holds back one of its tasks,
// so that once its key is free that task finds no later one of its lane
// handed out before it. Then its tasks go only to a worker that is free to
// start them at once.
func (s *scheduler) mayBuffer(l *lane) bool { return l.held == 0 }

// ring returns the lanes with waiting tasks in the order of their turns,
// those set aside included: what the tests compare with their model.
func (s *scheduler) ring() []*lane {
	var lanes []*lane
	for l := range s.turns.Iter() {
		lanes = append(lanes, l)
	}
	lanes = append(lanes, s.aside...)
	slices.SortFunc(lanes, func(a, b *lane) int { return cmp64(a.turn, b.turn) })
	return lanes
}
