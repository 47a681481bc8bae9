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
//     one (a sub-pool at its limit may not), which then goes to the back;
//   - within a lane, its unkeyed tasks and its ready keys take turns; a key
//     whose task is out (handed out and not ended) has its next task wait;
//   - with one worker busy, the pool hands out one task ahead, chosen in
//     turn when the one before left; that task counts as out, against its
//     sub-pool's limit and its key, and a pause takes it back, as does a
//     second lane with waiting tasks while the first was alone in the ring,
//     both times with its turn kept.
//
// Tasks end only when the model says so: a gated task when the driver
// releases it, a sleeping one when the fake clock has moved a second past
// its start. So the model knows the order of every start, and the fuzzer
// checks it against the order the tasks saw (fuzzTask.startSeq).
type turnModel struct {
	lanes   [3]*tmLane
	ring    []*tmLane
	buf     *fuzzTask // handed out ahead, not yet taken by the worker
	running *fuzzTask // on the worker
	endAt   time.Time // when running ends, if it sleeps
	now     time.Time // the model's clock while advance runs; else time.Now()
	pauses  int       // pauses in force or queued, not yet ended
	stopped bool      // the pool is stopping: it accepts nothing more
	starts  []*fuzzTask
	off     string // why the model stopped predicting, if it did
}

// A tmLane is the model of one lane.
type tmLane struct {
	target  int
	tasks   []*fuzzTask // unkeyed, waiting
	lines   map[string]*tmLine
	ready   []*tmLine
	keyTurn bool
	waiting int
	inRing  bool
	limit   int // 0 for the pool's own lane: no limit
	out     int // its tasks out
	closed  bool
}

// A tmLine is the model of one key's line in a lane.
type tmLine struct {
	key   string
	tasks []*fuzzTask
	out   bool
}

func newTurnModel(limits [3]int) *turnModel {
	tm := &turnModel{}
	for i := range tm.lanes {
		tm.lanes[i] = &tmLane{target: i, limit: limits[i], lines: map[string]*tmLine{}}
	}
	return tm
}

// stopPredicting turns the model off for the rest of the input.
func (tm *turnModel) stopPredicting(why string) {
	if tm.off == "" {
		tm.off = why
	}
}

func (l *tmLane) startable() bool {
	return (len(l.tasks) > 0 || len(l.ready) > 0) && (l.limit == 0 || l.out < l.limit)
}

// accept places tk, just accepted, and reports whether it was: false if its
// lane or the pool is stopping.
func (tm *turnModel) accept(tk *fuzzTask) bool {
	l := tm.lanes[tk.target]
	if tm.stopped || l.closed {
		return false
	}
	if tk.keyed {
		line := l.lines[tk.key]
		if line == nil {
			line = &tmLine{key: tk.key}
			l.lines[tk.key] = line
		}
		if line.out || len(line.tasks) > 0 {
			tm.wait(l, tk)
			tm.fill() // a take-back in wait may have emptied the buffer
			return true
		}
	}
	if tm.waiting() == 0 && tm.pauses == 0 && (l.limit == 0 || l.out < l.limit) && tm.buf == nil {
		tm.takeOut(l, tk)
		tm.place(tk)
		return true
	}
	tm.wait(l, tk)
	tm.fill()
	return true
}

func (tm *turnModel) waiting() int {
	n := 0
	for _, l := range tm.lanes {
		n += l.waiting
	}
	return n
}

// wait queues tk in lane l, and l in the ring.
func (tm *turnModel) wait(l *tmLane, tk *fuzzTask) {
	if tk.keyed {
		line := l.lines[tk.key]
		line.tasks = append(line.tasks, tk)
		if !line.out && len(line.tasks) == 1 {
			l.ready = append(l.ready, line)
		}
	} else {
		l.tasks = append(l.tasks, tk)
	}
	l.waiting++
	if !l.inRing {
		if tm.buf != nil && len(tm.ring) <= 1 && tm.buf.target != l.target {
			tm.takeBack()
		}
		l.inRing = true
		tm.ring = append(tm.ring, l)
	}
}

// takeOut counts tk out of its lane: against its limit and its key.
func (tm *turnModel) takeOut(l *tmLane, tk *fuzzTask) {
	l.out++
	if tk.keyed {
		l.lines[tk.key].out = true
	}
}

// place gives tk, handed out, to the worker if it is free, else to the
// buffer, which must be empty.
func (tm *turnModel) place(tk *fuzzTask) {
	if tm.running == nil {
		tm.start(tk)
	} else {
		tm.buf = tk
	}
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

// fill hands out the next task while the buffer is empty.
func (tm *turnModel) fill() {
	for tm.pauses == 0 && tm.buf == nil {
		tk := tm.next()
		if tk == nil {
			return
		}
		tm.place(tk)
	}
}

// next takes the next task in turn out of its lane, or returns nil.
func (tm *turnModel) next() *fuzzTask {
	for i, l := range tm.ring {
		if !l.startable() {
			continue
		}
		var tk *fuzzTask
		if len(l.ready) > 0 && (l.keyTurn || len(l.tasks) == 0) {
			line := l.ready[0]
			l.ready = l.ready[1:]
			tk, line.tasks = line.tasks[0], line.tasks[1:]
			l.keyTurn = false
		} else {
			tk, l.tasks = l.tasks[0], l.tasks[1:]
			l.keyTurn = true
		}
		l.waiting--
		tm.takeOut(l, tk)
		tm.ring = slices.Delete(tm.ring, i, i+1)
		if l.waiting > 0 {
			tm.ring = append(tm.ring, l)
		} else {
			l.inRing = false
		}
		return tk
	}
	return nil
}

// takeBack puts the buffered task back at the front of its lane, with its
// lane first in the ring and its turn in the lane kept.
func (tm *turnModel) takeBack() {
	tk := tm.buf
	if tk == nil {
		return
	}
	tm.buf = nil
	l := tm.lanes[tk.target]
	if tk.keyed {
		line := l.lines[tk.key]
		line.out = false
		line.tasks = slices.Insert(line.tasks, 0, tk)
		l.ready = slices.Insert(l.ready, 0, line)
	} else {
		l.tasks = slices.Insert(l.tasks, 0, tk)
	}
	l.keyTurn = tk.keyed
	l.out--
	l.waiting++
	tm.ring = slices.DeleteFunc(tm.ring, func(x *tmLane) bool { return x == l })
	tm.ring = slices.Insert(tm.ring, 0, l)
	l.inRing = true
}

// end ends the running task: its lane and its key have room again, and the
// worker takes the buffered task, if there is one, before the pool hands
// out the next.
func (tm *turnModel) end() {
	tk := tm.running
	tm.running = nil
	l := tm.lanes[tk.target]
	l.out--
	if tk.keyed {
		line := l.lines[tk.key]
		line.out = false
		if len(line.tasks) > 0 {
			l.ready = append(l.ready, line)
		} else {
			delete(l.lines, tk.key)
		}
	}
	if tm.buf != nil {
		tm.start(tm.buf)
		tm.buf = nil
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
// task handed out ahead, drops it if it is the lane's, and hands it out
// again if not.
func (tm *turnModel) stopLane(target int, drop bool) {
	l := tm.lanes[target]
	l.closed = true
	if !drop {
		return
	}
	tm.takeBack()
	defer tm.fill()
	l.tasks, l.ready, l.waiting = nil, nil, 0
	for k, line := range l.lines {
		line.tasks = nil
		if !line.out {
			delete(l.lines, k)
		}
	}
	if l.inRing {
		l.inRing = false
		tm.ring = slices.DeleteFunc(tm.ring, func(x *tmLane) bool { return x == l })
	}
}

// stopPool stops the pool: StopWait and Shutdown end every pause and run
// what waits; Stop (drop) drops it, the buffered task included.
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

// resize sets the limit of target's lane.
func (tm *turnModel) resize(target, n int) {
	tm.takeBack()
	tm.lanes[target].limit = n
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
		l := tm.lanes[i+1]
		want := l.waiting
		if tm.buf != nil && tm.buf.target == i+1 {
			want++ // handed out ahead, not started: it waits
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
	fmt.Fprintf(&b, "model: running %v, buffered %v, pauses %d, ring [", tm.running, tm.buf, tm.pauses)
	for _, l := range tm.ring {
		fmt.Fprintf(&b, " %s", targetName(l.target))
	}
	b.WriteString(" ]")
	for _, l := range tm.lanes {
		fmt.Fprintf(&b, "\n\t%s: out %d/%d, keyTurn %v, unkeyed %s", targetName(l.target), l.out, l.limit, l.keyTurn, taskList(l.tasks))
		for _, line := range l.lines {
			fmt.Fprintf(&b, ", key %s (out %v) %s", line.key, line.out, taskList(line.tasks))
		}
	}
	return b.String()
}
