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
//   - each target (the pool's own queue and each sub-pool's) is a lane; each
//     lane with waiting tasks has a turn, a number: the next task comes from
//     the lane with the lowest turn among those with a task that may start,
//     which then gets a turn after all the others; with one worker, every
//     sub-pool's limit is at or above the pool's maximum, so no limit holds
//     a task back (the maximum does);
//   - within a lane, tasks go in the order the pool accepted them, but a
//     task whose key is out (handed out and not ended) waits;
//   - with the worker busy, the pool hands out tasks ahead, in turn, to the
//     hand-off buffer, up to 64; but not a lane's tasks while a busy key
//     holds one of them back: those go only to a free worker. Tasks handed
//     out count as out, against their keys. A task that goes straight to
//     the worker or the buffer, nothing waiting, takes the next turn;
//   - hand-offs come back, to the front of their lanes, and each lane to
//     the first turn its tasks took, as if they had never left: all of
//     them for a pause; those from a sub-pool's first one, for its Resize;
//     all of them when a task comes to a lane with none waiting while the
//     buffer holds another lane's. When a lane whose tasks all waited for
//     a busy key may start again, those from the first that took a turn
//     after the lane's come back too, once the loop reads the report of
//     the key's end. Whenever a key that held back a task ends while
//     other lanes' tasks wait in the buffer, the worker that ran it may
//     take some of them first, and the model stops predicting there.
//
// Tasks end only when the model says so: a gated task when the driver
// releases it, a sleeping one when the fake clock has moved a second past
// its start. So the model knows the order of every start, and the fuzzer
// checks it against the order the tasks saw (fuzzTask.startSeq).
type turnModel struct {
	lanes   [3]*tmLane
	buf     []*fuzzTask         // handed out ahead, not yet taken by the worker
	turnOf  map[*fuzzTask]int64 // the turn each buffered task took
	next    int64               // the next turn to give
	running *fuzzTask           // on the worker
	endAt   time.Time           // when running ends, if it sleeps
	now     time.Time           // the model's clock while advance runs; else time.Now()
	pauses  int                 // pauses in force or queued, not yet ended
	stopped bool                // the pool is stopping: it accepts nothing more
	starts  []*fuzzTask
	seq     map[*fuzzTask]int // the order in which the pool accepted each task
	off     string            // why the model stopped predicting, if it did
}

// tmBuffer is the capacity of the model's hand-off buffer.
const tmBuffer = 64 // the pool's hand-off buffer (handoff.go)

// A tmLane is the model of one lane.
type tmLane struct {
	target  int
	waiting []*fuzzTask // in the order the pool accepted them
	keysOut map[string]bool
	turn    int64 // its turn, while it has waiting tasks
	closed  bool
}

func newTurnModel() *turnModel {
	tm := &turnModel{seq: map[*fuzzTask]int{}, turnOf: map[*fuzzTask]int64{}, next: 1}
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

// nextTurn gives the next turn.
func (tm *turnModel) nextTurn() int64 {
	tm.next++
	return tm.next - 1
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
	others := slices.ContainsFunc(tm.buf, func(b *fuzzTask) bool { return b.target != l.target })
	if tm.waiting() == 0 && tm.pauses == 0 && !(tk.keyed && l.keysOut[tk.key]) && !others {
		if tm.running == nil && len(tm.buf) == 0 {
			tm.nextTurn()
			tm.start(tk)
			tm.out(l, tk)
			return true
		}
		if len(tm.buf) < tmBuffer {
			tm.toBuffer(tk, tm.nextTurn())
			tm.out(l, tk)
			return true
		}
	}
	if len(l.waiting) == 0 && others {
		tm.takeBackFrom(0)
	}
	if len(l.waiting) == 0 {
		l.turn = tm.nextTurn()
	}
	l.waiting = append(l.waiting, tk)
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

// out counts tk, handed out, against its key.
func (tm *turnModel) out(l *tmLane, tk *fuzzTask) {
	if tk.keyed {
		l.keysOut[tk.key] = true
	}
}

func (tm *turnModel) toBuffer(tk *fuzzTask, turn int64) {
	tm.buf = append(tm.buf, tk)
	tm.turnOf[tk] = turn
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
		l := tm.nextLane()
		if l == nil {
			return
		}
		i := l.first()
		tk := l.waiting[i]
		switch {
		case tm.running == nil && len(tm.buf) == 0:
			tm.start(tk) // the worker is free
		case l.holds() || len(tm.buf) == tmBuffer:
			return // to a free worker only, or the buffer is full
		default:
			tm.toBuffer(tk, l.turn)
		}
		tm.out(l, tk)
		l.waiting = slices.Delete(l.waiting, i, i+1)
		l.turn = tm.nextTurn()
	}
}

// nextLane returns the lane whose turn it is, or nil.
func (tm *turnModel) nextLane() *tmLane {
	var next *tmLane
	for _, l := range tm.lanes {
		if l.first() >= 0 && (next == nil || l.turn < next.turn) {
			next = l
		}
	}
	return next
}

// takeBackFrom puts the buffered tasks from the i-th back at the front of
// their lanes, each lane at the first turn its tasks took.
func (tm *turnModel) takeBackFrom(i int) {
	for _, tk := range slices.Backward(tm.buf[i:]) {
		l := tm.lanes[tk.target]
		if tk.keyed {
			l.keysOut[tk.key] = false
		}
		if t := tm.turnOf[tk]; len(l.waiting) == 0 || t < l.turn {
			l.turn = t
		}
		delete(tm.turnOf, tk)
		l.waiting = append(l.waiting, tk)
		slices.SortFunc(l.waiting, func(a, b *fuzzTask) int { return tm.seq[a] - tm.seq[b] })
	}
	tm.buf = tm.buf[:i]
}

// takeBack puts every buffered task back.
func (tm *turnModel) takeBack() { tm.takeBackFrom(0) }

// takeBackOf takes back the buffered tasks from the first of target's
// lane.
func (tm *turnModel) takeBackOf(target int) {
	if i := slices.IndexFunc(tm.buf, func(tk *fuzzTask) bool { return tk.target == target }); i >= 0 {
		tm.takeBackFrom(i)
	}
}

// end ends the running task: its key has room again, and the worker takes
// the first buffered task, if there is one, before the pool hands out the
// next. A lane all of whose waiting tasks waited for the key may start
// again: it takes back its place in the buffer.
func (tm *turnModel) end() {
	tk := tm.running
	tm.running = nil
	if tk.keyed {
		l := tm.lanes[tk.target]
		held := len(l.waiting) > 0 && l.first() < 0
		heldBack := l.holds()
		l.keysOut[tk.key] = false
		if heldBack && slices.ContainsFunc(tm.buf, func(b *fuzzTask) bool { return b.target != l.target }) {
			// The key held back a task of l, which now goes next in l;
			// other lanes' tasks wait in the buffer. Which starts first,
			// the model cannot tell: the worker, free once it has
			// reported the key's end, may take buffered tasks while the
			// loop, which reads the report, takes them back or hands
			// the freed task out (Pool's doc, Order: "those they take in
			// the moment before the dispatcher sees the change").
			tm.stopPredicting("a busy key's end races the worker's take of buffered tasks")
		}
		if held && l.first() >= 0 {
			if i := slices.IndexFunc(tm.buf, func(b *fuzzTask) bool { return tm.turnOf[b] > l.turn }); i >= 0 {
				tm.takeBackFrom(i)
			}
		}
	}
	if len(tm.buf) > 0 {
		tm.start(tm.buf[0])
		delete(tm.turnOf, tm.buf[0])
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
	defer tm.fill()
	for _, tk := range tm.buf {
		if tk.target == target && tk.keyed {
			l.keysOut[tk.key] = false
		}
	}
	tm.buf = slices.DeleteFunc(tm.buf, func(tk *fuzzTask) bool { return tk.target == target })
	l.waiting = nil
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
	fmt.Fprintf(&b, "model: running %s, buffered %s, pauses %d", running, taskList(tm.buf), tm.pauses)
	for _, l := range tm.lanes {
		fmt.Fprintf(&b, "\n\t%s: turn %d, waiting %s, keys out %v", targetName(l.target), l.turn, taskList(l.waiting), l.keysOut)
	}
	return b.String()
}
