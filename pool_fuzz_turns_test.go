package workerpool_test

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// A turnModel predicts which task the pool starts next under fair turns and
// keyed order, for FuzzPool's v2 inputs with one worker and an unbounded
// queue. It mirrors the rules the pool documents, step by step:
//
//   - each target (the pool's own queue and each sub-pool's) is a lane; the
//     lanes with waiting tasks form a ring, in the order of their turns;
//   - the next task comes from the first lane in the ring that may start
//     one, which then goes to the back; with one worker, every sub-pool's
//     limit is at or above the pool's maximum, so no limit holds a task
//     back (the maximum does);
//   - within a lane, tasks go in the order the pool accepted them, but a
//     task whose key is out (handed out and not ended) waits;
//   - with the worker busy, the pool hands out tasks ahead, to the hand-off
//     buffer: up to 64 while they are all of one lane and no other lane
//     has waiting tasks, else one. Tasks handed out count as out, against
//     their keys. A pause takes them back, as does a resize, and a task of
//     another lane that must wait while one lane or none waits: they go
//     back to the front of their lanes, with their lanes first in the
//     ring.
//
// Tasks end only when the model says so: a gated task when the driver
// releases it, a sleeping one when the fake clock has moved a second past
// its start. So the model knows the order of every start, and the fuzzer
// checks it against the order the tasks saw (fuzzTask.startSeq).
type turnModel struct {
	lanes   [3]*tmLane
	ring    []*tmLane
	buf     []*fuzzTask // handed out ahead, not yet taken by the worker
	running *fuzzTask   // on the worker
	endAt   time.Time   // when running ends, if it sleeps
	now     time.Time   // the model's clock while advance runs; else time.Now()
	pauses  int         // pauses in force or queued, not yet ended
	stopped bool        // the pool is stopping: it accepts nothing more
	starts  []*fuzzTask
	seq     map[*fuzzTask]int // the order in which the pool accepted each task
	off     string            // why the model stopped predicting, if it did
}

// tmBuffer is the capacity of the model's hand-off buffer.
const tmBuffer = 64

// A tmLane is the model of one lane.
type tmLane struct {
	target  int
	waiting []*fuzzTask // in the order the pool accepted them
	keysOut map[string]bool
	inRing  bool
	closed  bool
}

func newTurnModel() *turnModel {
	tm := &turnModel{seq: map[*fuzzTask]int{}}
	for i := range tm.lanes {
		tm.lanes[i] = &tmLane{target: i, keysOut: map[string]bool{}}
	}
	return tm
}

// stopPredicting turns the model off for the rest of the input.
func (tm *turnModel) stopPredicting(why string) {
	if tm.off == "" {
		tm.off = why
	}
}

// first returns the index of the first waiting task of l that may start,
// or -1.
func (l *tmLane) first() int {
	return slices.IndexFunc(l.waiting, func(tk *fuzzTask) bool { return !tk.keyed || !l.keysOut[tk.key] })
}

// holds reports whether a busy key holds back a waiting task of l.
func (l *tmLane) holds() bool {
	return slices.ContainsFunc(l.waiting, func(tk *fuzzTask) bool { return tk.keyed && l.keysOut[tk.key] })
}

// accept places tk, just accepted, and reports whether it was: false if its
// lane or the pool is stopping.
func (tm *turnModel) accept(tk *fuzzTask) bool {
	l := tm.lanes[tk.target]
	if tm.stopped || l.closed {
		return false
	}
	tm.seq[tk] = len(tm.seq)
	if tm.waiting() == 0 && tm.pauses == 0 && !(tk.keyed && l.keysOut[tk.key]) && tm.place(l, tk) {
		return true
	}
	tm.wait(l, tk)
	tm.fill()
	return true
}

func (tm *turnModel) waiting() int {
	n := 0
	for _, l := range tm.lanes {
		n += len(l.waiting)
	}
	return n
}

// wait queues tk in lane l, and l in the ring. If the buffer holds another
// lane's tasks, handed out while no lane but theirs waited, they go back
// first, with the rest of the buffer.
func (tm *turnModel) wait(l *tmLane, tk *fuzzTask) {
	if !l.inRing && len(tm.ring) <= 1 && slices.ContainsFunc(tm.buf, func(b *fuzzTask) bool { return b.target != l.target }) {
		tm.takeBack()
	}
	l.waiting = append(l.waiting, tk)
	if !l.inRing {
		l.inRing = true
		tm.ring = append(tm.ring, l)
	}
}

// place gives tk, a task of lane l that may start, to the worker if it is
// free, else to the buffer if it may take it, and reports whether it did.
// It counts tk out.
func (tm *turnModel) place(l *tmLane, tk *fuzzTask) bool {
	switch {
	case tm.running == nil && len(tm.buf) == 0:
		tm.start(tk)
	case l.holds():
		return false // it goes to a free worker only, never to wait in the buffer
	case len(tm.buf) == 0 || !slices.ContainsFunc(tm.buf, func(b *fuzzTask) bool { return b.target != l.target }) && len(tm.ring) <= 1 && len(tm.buf) < tmBuffer:
		tm.buf = append(tm.buf, tk)
	default:
		return false
	}
	if tk.keyed {
		l.keysOut[tk.key] = true
	}
	return true
}

func (tm *turnModel) start(tk *fuzzTask) {
	tm.running = tk
	tm.starts = append(tm.starts, tk)
	now := tm.now
	if now.IsZero() {
		now = time.Now()
	}
	tm.endAt = now.Add(time.Second)
}

// fill hands out the next tasks, in turn, while the worker or the buffer
// takes them.
func (tm *turnModel) fill() {
	for tm.pauses == 0 {
		i, l := tm.next()
		if l == nil {
			return
		}
		tk := l.waiting[i]
		if !tm.place(l, tk) {
			return
		}
		l.waiting = slices.Delete(l.waiting, i, i+1)
		j := slices.Index(tm.ring, l)
		tm.ring = slices.Delete(tm.ring, j, j+1)
		if len(l.waiting) > 0 {
			tm.ring = append(tm.ring, l)
		} else {
			l.inRing = false
		}
	}
}

// next returns the next task in turn, as its index in its lane, and its
// lane, or a nil lane.
func (tm *turnModel) next() (int, *tmLane) {
	for _, l := range tm.ring {
		if i := l.first(); i >= 0 {
			return i, l
		}
	}
	return 0, nil
}

// takeBack puts the buffered tasks back at the front of their lanes, with
// their lanes first in the ring.
func (tm *turnModel) takeBack() { tm.takeBackOf(-1) }

// takeBackOf takes back the buffered tasks of target's lane only, or of
// every lane if target is -1.
func (tm *turnModel) takeBackOf(target int) {
	var kept []*fuzzTask
	for _, tk := range slices.Backward(tm.buf) {
		if target >= 0 && tk.target != target {
			kept = append(kept, tk)
			continue
		}
		l := tm.lanes[tk.target]
		if tk.keyed {
			l.keysOut[tk.key] = false
		}
		l.waiting = append(l.waiting, tk)
		slices.SortFunc(l.waiting, func(a, b *fuzzTask) int { return tm.seq[a] - tm.seq[b] })
		tm.ring = slices.DeleteFunc(tm.ring, func(x *tmLane) bool { return x == l })
		tm.ring = slices.Insert(tm.ring, 0, l)
		l.inRing = true
	}
	slices.Reverse(kept)
	tm.buf = kept
}

// end ends the running task: its key has room again, and the worker takes
// the first buffered task, if there is one, before the pool hands out the
// next.
func (tm *turnModel) end() {
	tk := tm.running
	tm.running = nil
	if tk.keyed {
		tm.lanes[tk.target].keysOut[tk.key] = false
	}
	if len(tm.buf) > 0 {
		tm.start(tm.buf[0])
		tm.buf = tm.buf[1:]
	}
	tm.fill()
}

// pause takes hold of a pause, or queues it behind the one in force.
func (tm *turnModel) pause() {
	if tm.stopped {
		return
	}
	if tm.pauses++; tm.pauses == 1 {
		tm.takeBack()
	}
}

// resume ends the oldest pause.
func (tm *turnModel) resume() {
	if tm.pauses > 0 {
		tm.pauses--
		tm.fill()
	}
}

// stopLane drops the waiting tasks of target's lane (drop) or lets them run
// (StopWait); either way the lane accepts nothing more. Stop takes back the
// lane's tasks handed out ahead and drops them with its waiting ones.
func (tm *turnModel) stopLane(target int, drop bool) {
	l := tm.lanes[target]
	l.closed = true
	if !drop {
		return
	}
	tm.takeBackOf(target)
	defer tm.fill()
	l.waiting = nil
	if l.inRing {
		l.inRing = false
		tm.ring = slices.DeleteFunc(tm.ring, func(x *tmLane) bool { return x == l })
	}
}

// stopPool stops the pool: StopWait and Shutdown end every pause and run
// what waits; Stop (drop) drops it, the buffered tasks included.
func (tm *turnModel) stopPool(drop bool) {
	tm.stopped = true
	if drop {
		tm.buf = nil
		for i := range tm.lanes {
			tm.stopLane(i, true)
		}
		return
	}
	tm.pauses = 0
	tm.fill()
}

// advance moves the clock to now: a running sleeping task ends on time, and
// so may the sleeping tasks that follow it.
func (tm *turnModel) advance(now time.Time) {
	for tm.running != nil && tm.running.kind == kindSleep && !tm.endAt.After(now) {
		tm.now = tm.endAt // what starts now starts as the sleeper ends
		tm.end()
	}
	tm.now = time.Time{}
}

// resize models a sub-pool's Resize: its tasks in the buffer go back, and
// the buffer is filled again. (With one worker, no limit holds a task
// back.)
func (tm *turnModel) resize(target int) {
	tm.takeBackOf(target)
	tm.fill()
}

// released ends the running task, which the driver released.
func (tm *turnModel) released(tk *fuzzTask) {
	if tm.running == tk {
		tm.end()
	}
}

// check compares the predicted starts with the observed ones, and the
// sub-pools' waiting tasks with their Status, and reports a mismatch.
func (tm *turnModel) check(m *fuzzModel) {
	if tm.off != "" {
		return
	}
	var seen []*fuzzTask
	for _, tk := range m.tasks {
		if tk.startSeq.Load() > 0 {
			seen = append(seen, tk)
		}
	}
	slices.SortFunc(seen, func(a, b *fuzzTask) int { return int(a.startSeq.Load() - b.startSeq.Load()) })
	if !slices.Equal(seen, tm.starts) {
		m.failf("under fair turns and key order, tasks should have started %s; they started %s\n%s",
			taskList(tm.starts), taskList(seen), tm)
		return
	}
	for i, s := range m.subs {
		want := len(tm.lanes[i+1].waiting)
		for _, tk := range tm.buf {
			if tk.target == i+1 {
				want++ // handed out ahead, not started: it waits
			}
		}
		if got := s.Status().Waiting; got != want {
			m.failf("sub-pool %s: Status().Waiting = %d, want %d\n%s", s.Name(), got, want, tm)
		}
	}
}

func taskList(tasks []*fuzzTask) string {
	ids := make([]string, len(tasks))
	for i, tk := range tasks {
		ids[i] = fmt.Sprint(tk.id)
	}
	return "[" + strings.Join(ids, " ") + "]"
}

// String describes the model's state, for failure messages.
func (tm *turnModel) String() string {
	var b strings.Builder
	running := "none"
	if tm.running != nil {
		running = fmt.Sprint(tm.running.id)
	}
	fmt.Fprintf(&b, "model: running %s, buffered %s, pauses %d, ring [", running, taskList(tm.buf), tm.pauses)
	for _, l := range tm.ring {
		fmt.Fprintf(&b, " %s", targetName(l.target))
	}
	b.WriteString(" ]")
	for _, l := range tm.lanes {
		fmt.Fprintf(&b, "\n\t%s: waiting %s, keys out %v", targetName(l.target), taskList(l.waiting), l.keysOut)
	}
	return b.String()
}
