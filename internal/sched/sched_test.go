package sched

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rig drives a scheduler with tasks named by strings, so that tests can
// say which task went where.
type rig struct {
	t      *testing.T
	s      *Scheduler[int]
	queues []*Queue[int] // queues[0] is the pool's own
	names  map[uint64]string
	seq    uint64
}

func newRig(t *testing.T, max int, limits ...int) *rig {
	r := &rig{t: t, s: New[int](max), names: map[uint64]string{}}
	r.queues = append(r.queues, r.s.Own())
	for _, limit := range limits {
		r.queues = append(r.queues, NewQueue[int]("sub-pool", limit))
	}
	return r
}

// submit admits a task named name to queue i, keyed if key is not "", and
// queues it: the tests hand tasks out with next.
func (r *rig) submit(i int, key, name string) Entry[int] {
	r.seq++
	e := r.s.Admit(Task[int]{Fn: func() {}}, r.queues[i], key, key != "", r.seq, 0)
	r.names[e.Seq] = name
	r.s.Wait(e)
	return e
}

// next hands out the next task and returns its entry, or fails.
func (r *rig) next() Entry[int] {
	r.t.Helper()
	_, ok := r.s.Peek()
	require.True(r.t, ok, "a task may start")
	return r.s.Take()
}

// order hands out n tasks, ending each before the next, and names them.
func (r *rig) order(n int) []string {
	var got []string
	for range n {
		e := r.next()
		got = append(got, r.names[e.Seq])
		r.s.Ended(e)
	}
	return got
}

func (r *rig) namesOf(es []Entry[int]) []string {
	var names []string
	for _, e := range es {
		names = append(names, r.names[e.Seq])
	}
	return names
}

func TestKeysHoldBackOnlyTheTasksOfABusyKey(t *testing.T) {
	r := newRig(t, 1)
	r.submit(0, "a", "K1")
	r.submit(0, "b", "K2")
	r.submit(0, "", "U1")
	r.submit(0, "c", "K3")
	r.submit(0, "", "U2")
	assert.Equal(t, []string{"K1", "K2", "U1", "K3", "U2"}, r.order(5),
		"no key was busy: acceptance order")

	r.submit(0, "a", "A1")
	r.submit(0, "a", "A2")
	r.submit(0, "", "U3")
	r.submit(0, "b", "B1")
	a1 := r.next()
	assert.Equal(t, "A1", r.names[a1.Seq])
	// A2 waits for A1; U3 and B1 do not.
	assert.Equal(t, "U3", r.names[r.next().Seq])
	assert.Equal(t, "B1", r.names[r.next().Seq])
	_, ok := r.s.Peek()
	assert.False(t, ok, "A2 waits while A1 is out")
	assert.False(t, r.s.MayBuffer(r.s.Own()), "none of its queue's tasks may wait ahead of A2")
	r.s.Ended(a1)
	assert.Equal(t, "A2", r.names[r.next().Seq])
}

func TestAFreedKeyTakesItsPlaceInAcceptanceOrder(t *testing.T) {
	r := newRig(t, 4)
	r.submit(0, "a", "A1")
	a1 := r.next()
	r.submit(0, "", "U1")
	r.submit(0, "a", "A2") // held by A1
	r.submit(0, "", "U2")
	r.s.Ended(a1)
	assert.Equal(t, []string{"U1", "A2", "U2"}, r.order(3))
}

func TestQueuesTakeTurnsAndAQueueAtItsLimitKeepsItsPlace(t *testing.T) {
	r := newRig(t, 4, 1, 4) // queues: own, A (limit 1), B
	for i := range 3 {
		r.submit(0, "", fmt.Sprint("P", i))
		r.submit(1, "", fmt.Sprint("A", i))
		r.submit(2, "", fmt.Sprint("B", i))
	}
	var got []string
	var a Entry[int]
	for range 5 {
		e := r.next()
		got = append(got, r.names[e.Seq])
		if e.Queue == r.queues[1] {
			a = e // A's one place: held
		} else {
			r.s.Ended(e)
		}
	}
	assert.Equal(t, []string{"P0", "A0", "B0", "P1", "B1"}, got, "A at its limit is passed over")
	r.s.Ended(a)
	assert.Equal(t, "A1", r.names[r.next().Seq], "A kept its place: its turn comes first")
}

func TestALimitAtOrAboveTheMaximumHoldsNothingBack(t *testing.T) {
	r := newRig(t, 2, 2)
	r.submit(1, "", "A0")
	r.submit(1, "", "A1")
	r.submit(1, "", "A2")
	r.next()
	r.next()
	_, ok := r.s.Peek()
	assert.True(t, ok, "the pool's maximum holds back A's third task, not A's limit")
	r.s.SetMax(4)
	_, ok = r.s.Peek()
	assert.False(t, ok, "below the maximum, the limit binds")
}

func TestALentPlaceLetsTheQueuesNextTaskStartAndItsKeyStaysBusy(t *testing.T) {
	r := newRig(t, 4, 1)
	r.submit(1, "k", "K1")
	r.submit(1, "k", "K2")
	r.submit(1, "", "U1")
	k1 := r.next()
	_, ok := r.s.Peek()
	require.False(t, ok, "the queue is at its limit")
	r.s.Lend(k1)
	u1 := r.next()
	assert.Equal(t, "U1", r.names[u1.Seq], "the lent place goes to the next task; K2 waits for its key")
	r.s.Reclaim(k1)
	r.s.Ended(u1)
	_, ok = r.s.Peek()
	assert.False(t, ok, "reclaimed, K1 holds the place and its key again")
	r.s.Ended(k1)
	assert.Equal(t, "K2", r.names[r.next().Seq])
}

func TestDropAllReturnsTasksInAcceptanceOrder(t *testing.T) {
	r := newRig(t, 1, 1)
	r.submit(0, "", "P1")
	r.submit(1, "", "S1")
	r.submit(0, "k", "K1")
	r.submit(0, "", "P2")
	r.submit(1, "j", "J1")
	r.submit(1, "", "S2")
	r.submit(0, "k", "K2")
	assert.Equal(t, []string{"P1", "S1", "K1", "P2", "J1", "S2", "K2"}, r.namesOf(r.s.DropAll()))
	assert.Zero(t, r.s.Waiting())
	assert.Empty(t, r.queues[0].keys, "a key with nothing waiting or out costs nothing")
}

func TestPutBackRestoresTheOrder(t *testing.T) {
	r := newRig(t, 4, 4)
	r.submit(0, "", "P1")
	r.submit(0, "a", "A1")
	r.submit(1, "", "S1")
	r.submit(0, "", "P2")
	r.submit(0, "a", "A2")
	r.submit(1, "", "S2")
	var out []Entry[int]
	for range 3 {
		out = append(out, r.next())
	}
	assert.Equal(t, []string{"P1", "S1", "A1"}, r.namesOf(out))
	r.s.PutBack(out)
	assert.Equal(t, []string{"P1", "S1", "A1", "S2", "P2", "A2"}, r.order(6))
}

func TestAQueueOfOneTaskHoldsOneSlot(t *testing.T) {
	q := NewQueue[int]("sub-pool", 1)
	q.push(Entry[int]{Task: Task[int]{Fn: func() {}}, Queue: q, Seq: 7})
	assert.Equal(t, 1, len(q.fifo.fns.buf), "one func slot")
	assert.Equal(t, 1, len(q.fifo.seqs.gaps.buf), "one gap slot")
	assert.Zero(t, len(q.fifo.waiters.buf), "no waiter slot for a func")
}

func TestARingKeepsItsOrderThroughGrowthAndShrinkage(t *testing.T) {
	var r ring[int]
	var model []int
	for i := range 1000 {
		switch i % 7 {
		case 0, 1, 2, 3:
			r.pushBack(i)
			model = append(model, i)
		case 4:
			r.pushFront(-i)
			model = append([]int{-i}, model...)
		default:
			if len(model) > 0 {
				require.Equal(t, model[0], r.popFront())
				model = model[1:]
			}
		}
		require.Equal(t, len(model), r.len())
		for j, x := range model {
			require.Equal(t, x, r.at(j))
		}
	}
	for len(model) > 0 {
		require.Equal(t, model[0], r.popFront())
		model = model[1:]
	}
	assert.LessOrEqual(t, len(r.buf), 2, "an emptied ring shrinks back to a slot or two")
}

// FuzzSched drives the scheduler alone with operations decoded from the
// input, and checks every answer against a model that keeps every task in
// one list and every queue's turn as a number: the next task is the first,
// in the order of the queues' turns, of the queues under their limit, of
// that queue's tasks whose key is free.
func FuzzSched(f *testing.F) {
	f.Add([]byte{0x00, 0x10, 0x21, 0x03, 0x04, 0x05, 0x13, 0x06})
	f.Add([]byte{0x30, 0x41, 0x52, 0x60, 0x03, 0x03, 0x07, 0x08, 0x04, 0x03})
	f.Add([]byte{0x01, 0x01, 0x11, 0x22, 0x32, 0x03, 0x03, 0x09, 0x0a, 0x03, 0x05})
	f.Add([]byte{0x00, 0x00, 0x00, 0x10, 0x00, 0x1a, 0x0a, 0x03, 0x2a, 0x06, 0x03, 0x0b})
	f.Add([]byte{0x01, 0x00, 0x01, 0x11, 0x22, 0x03, 0x03, 0x0c, 0x03, 0x1c, 0x09})
	f.Add([]byte{0x01, 0x01, 0x11, 0x21, 0x01, 0x11, 0x03, 0x03, 0x03, 0x04, 0x14, 0x03, 0x05})
	f.Add([]byte{0x00, 0x11, 0x11, 0x41, 0x03, 0x0d, 0x03, 0x0e, 0x04, 0x03, 0x03})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newModel(t, data)
		if len(data) == 0 {
			return
		}
		for _, b := range data[1:] {
			m.step(b)
		}
		m.step(opDropAll)
	})
}

// The operations of FuzzSched, one byte each: the low 4 bits select it,
// the high 4 bits are its argument.
const (
	opSubmit    = iota // submit to queue arg%3, key arg/3%3 (0: none)
	opSubmit2          // the same, another spread of keys
	opStartNow         // submit as the loop does: start it if StartsNow, else wait
	opTake             // hand out the next task
	opEnd              // end the arg-th task out (reclaiming its place first if lent)
	opPutBack          // put back the last 1+arg%3 tasks handed out, if none ended since
	opDropQueue        // drop queue arg%3
	opSetMax           // set the maximum to 1+arg%4
	opSetLimit         // set a sub-pool's limit to 1+arg/2%4
	opTakeAll          // hand out every task that may start
	opCancel           // cancel the arg-th unkeyed task: waiting ones leave, those out stay
	opDropAll
	opLeave   // the arg-th task out leaves before it started: its queue gets its turn back
	opLend    // the arg-th task out, not lent, lends its place
	opReclaim // the arg-th task out, lent, reclaims its place
)

type model struct {
	t      *testing.T
	s      *Scheduler[int]
	queues []*Queue[int]
	turn   []int64     // each queue's turn, while it has waiting tasks
	back   int64       // the next turn to give
	seq    uint64      // the last seq given
	wait   []modelTask // waiting, in acceptance order
	out    []modelTask // handed out, in that order
	// sinceTake is how many tasks were handed out since an end, a drop, a
	// loan or a put back, which a put back may return.
	sinceTake int
	limits    []int
	max       int
	timed     bool // entries carry a time: the scheduler keeps it with them
}

type modelTask struct {
	e     Entry[int]
	queue int
	key   string
	lent  bool
}

func newModel(t *testing.T, data []byte) *model {
	max := 1
	if len(data) > 0 {
		max = 1 + int(data[0]%4)
	}
	m := &model{t: t, s: New[int](max), max: max, limits: []int{0, 1, 2}, turn: make([]int64, 3), back: 1}
	m.timed = len(data) > 0 && data[0]&0x10 != 0
	m.queues = []*Queue[int]{m.s.Own(), NewQueue[int]("A", 1), NewQueue[int]("B", 2)}
	return m
}

// acceptedAt is the time a timed model gives the task numbered seq.
func (m *model) acceptedAt(seq uint64) int64 {
	if !m.timed {
		return 0
	}
	return int64(seq)*10 + 1
}

// checkAccepted checks that e kept the time it was admitted with.
func (m *model) checkAccepted(e Entry[int], what string) {
	require.Equal(m.t, m.acceptedAt(e.Seq), e.Accepted, "%s: task %d's time", what, e.Seq)
}

// nextTurn gives the next turn, as the scheduler does.
func (m *model) nextTurn() int64 {
	m.back++
	return m.back - 1
}

// waits reports whether queue l has waiting tasks.
func (m *model) waits(l int) bool {
	return slices.ContainsFunc(m.wait, func(x modelTask) bool { return x.queue == l })
}

// mayStart reports whether queue l has a task that may start.
func (m *model) mayStart(l int) bool {
	if !m.underLimit(l) {
		return false
	}
	return slices.ContainsFunc(m.wait, func(mt modelTask) bool { return mt.queue == l && !m.keyOut(l, mt.key) })
}

func (m *model) step(b byte) {
	op, arg := int(b&15), int(b>>4)
	before := make([]bool, len(m.queues)) // queues passed over before the step
	for l := range m.queues {
		before[l] = m.waits(l) && !m.mayStart(l)
	}
	m.s.Rejoined() // forget what came before
	switch op {
	case opSubmit, opSubmit2, opStartNow:
		l, key := arg%3, ""
		if k := arg / 3 % 3; k > 0 {
			key = fmt.Sprint("k", k+op)
		}
		m.seq++
		e := m.s.Admit(Task[int]{Fn: func() {}}, m.queues[l], key, key != "", m.seq, m.acceptedAt(m.seq))
		mt := modelTask{e: e, queue: l, key: key}
		if op == opStartNow {
			want := len(m.wait) == 0 && m.underLimit(l) && !m.keyOut(l, key)
			require.Equal(m.t, want, m.s.StartsNow(e), "StartsNow")
			if want {
				// The loop gives a task handed out without waiting a turn.
				require.Equal(m.t, m.nextTurn(), m.s.NextTurn(), "NextTurn")
				mt.e.Turn = m.back - 1
				m.s.Start(mt.e)
				m.out = append(m.out, mt)
				m.sinceTake = 0
				break
			}
		}
		if !m.waits(l) {
			m.turn[l] = m.nextTurn()
		}
		m.s.Wait(e)
		m.wait = append(m.wait, mt)
	case opTake:
		m.take()
	case opTakeAll:
		for m.take() {
		}
	case opEnd:
		if len(m.out) == 0 {
			return
		}
		i := arg % len(m.out)
		if m.out[i].lent {
			m.s.Reclaim(m.out[i].e)
		}
		m.s.Ended(m.out[i].e)
		m.out = slices.Delete(m.out, i, i+1)
		m.sinceTake = 0
	case opLend, opReclaim:
		lent := op == opReclaim
		var is []int
		for i, mt := range m.out {
			if mt.lent == lent {
				is = append(is, i)
			}
		}
		if len(is) == 0 {
			return
		}
		i := is[arg%len(is)]
		if lent {
			m.s.Reclaim(m.out[i].e)
		} else {
			m.s.Lend(m.out[i].e)
		}
		m.out[i].lent = !lent
		m.sinceTake = 0
	case opPutBack:
		n := min(1+arg%3, m.sinceTake)
		if n == 0 {
			return
		}
		back := m.out[len(m.out)-n:]
		m.out = m.out[:len(m.out)-n]
		var es []Entry[int]
		for _, mt := range back {
			es = append(es, mt.e)
		}
		m.s.PutBack(es)
		for _, mt := range slices.Backward(back) {
			if !m.waits(mt.queue) || mt.e.Turn < m.turn[mt.queue] {
				m.turn[mt.queue] = mt.e.Turn
			}
			m.wait = slices.Insert(m.wait, 0, mt)
		}
		slices.SortStableFunc(m.wait, func(a, b modelTask) int { return BySeq(a.e, b.e) })
		m.sinceTake -= n
	case opDropQueue:
		l := arg % 3
		got := m.s.DropQueue(m.queues[l])
		var want []Entry[int]
		m.wait = slices.DeleteFunc(m.wait, func(mt modelTask) bool {
			if mt.queue == l {
				want = append(want, mt.e)
			}
			return mt.queue == l
		})
		m.checkSame(want, got, "DropQueue")
		m.sinceTake = 0
	case opSetMax:
		m.max = 1 + arg%4
		m.s.SetMax(m.max)
	case opSetLimit:
		l := 1 + arg%2
		m.limits[l] = 1 + arg/2%4
		m.s.SetLimit(m.queues[l], m.limits[l])
	case opCancel:
		// Only a waiter is given up on, and SubmitKey takes funcs: a
		// cancelled task is never keyed.
		all := slices.DeleteFunc(append(append([]modelTask{}, m.wait...), m.out...), func(x modelTask) bool { return x.key != "" })
		if len(all) == 0 {
			return
		}
		mt := all[arg%len(all)]
		waiting := slices.IndexFunc(m.wait, func(x modelTask) bool { return x.e.Seq == mt.e.Seq })
		want := waiting >= 0
		require.Equal(m.t, want, m.s.Cancel(m.queues[mt.queue], mt.e.Seq), "Cancel: only a waiting task leaves")
		require.False(m.t, m.s.Cancel(m.queues[mt.queue], mt.e.Seq), "Cancel: a task leaves once")
		if want {
			m.wait = slices.Delete(m.wait, waiting, waiting+1)
			m.sinceTake = 0
		}
	case opLeave:
		var is []int
		for i, mt := range m.out {
			if !mt.lent { // a task whose worker waits on the pool has started
				is = append(is, i)
			}
		}
		if len(is) == 0 {
			return
		}
		i := is[arg%len(is)]
		mt := m.out[i]
		m.s.Left(mt.e)
		m.out = slices.Delete(m.out, i, i+1)
		if m.waits(mt.queue) && mt.e.Turn < m.turn[mt.queue] {
			m.turn[mt.queue] = mt.e.Turn
		}
		m.sinceTake = 0
	case opDropAll:
		got := m.s.DropAll()
		var want []Entry[int]
		for _, mt := range m.wait {
			want = append(want, mt.e)
		}
		m.checkSame(want, got, "DropAll")
		m.wait, m.sinceTake = nil, 0
	default:
		return
	}
	m.check()
	// A queue passed over that may start again, at the turn it kept: the
	// loop must hear of it, to take back what was handed out after that
	// turn. (Put backs and new waits move queues themselves.)
	if op != opPutBack {
		low, rejoined := m.s.Rejoined()
		for l := range m.queues {
			if before[l] && m.waits(l) && m.mayStart(l) {
				require.True(m.t, rejoined, "queue %d went back into the turns: the loop hears of it", l)
				require.LessOrEqual(m.t, low, m.turn[l], "queue %d's turn is at least the lowest rejoined", l)
			}
		}
	}
}

// take hands out the next task, checks it is the model's, and reports
// whether there was one.
func (m *model) take() bool {
	want, ok := m.next()
	e, got := m.s.Peek()
	require.Equal(m.t, ok, got, "Peek: a task may start")
	if !ok {
		return false
	}
	require.Equal(m.t, m.wait[want].e.Seq, e.Seq, "Peek: the next task")
	m.checkAccepted(e, "Peek")
	require.Equal(m.t, m.turn[m.wait[want].queue], e.Turn, "Peek: the turn it takes")
	taken := m.s.Take()
	m.checkAccepted(taken, "Take")
	require.Equal(m.t, e.Seq, taken.Seq, "Take hands out what Peek returned")
	require.Equal(m.t, e.Turn, taken.Turn, "Take gives the turn Peek said")
	mt := m.wait[want]
	mt.e = taken
	m.wait = slices.Delete(m.wait, want, want+1)
	m.out = append(m.out, mt)
	m.sinceTake++
	m.turn[mt.queue] = m.nextTurn()
	return true
}

// turns returns the queues with waiting tasks, in the order of their turns.
func (m *model) turns() []int {
	var turns []int
	for l := range m.queues {
		if m.waits(l) {
			turns = append(turns, l)
		}
	}
	slices.SortFunc(turns, func(a, b int) int { return cmp.Compare(m.turn[a], m.turn[b]) })
	return turns
}

// next returns the index in m.wait of the task to go next.
func (m *model) next() (int, bool) {
	for _, l := range m.turns() {
		if !m.underLimit(l) {
			continue
		}
		for i, mt := range m.wait {
			if mt.queue == l && !m.keyOut(l, mt.key) {
				return i, true
			}
		}
	}
	return 0, false
}

// running counts queue l's tasks out whose places are not lent: the
// scheduler counts them only for a queue with a limit.
func (m *model) running(l int) int {
	if m.limits[l] == 0 {
		return 0
	}
	n := 0
	for _, mt := range m.out {
		if mt.queue == l && !mt.lent {
			n++
		}
	}
	return n
}

func (m *model) underLimit(l int) bool {
	limit := m.limits[l]
	return limit == 0 || limit >= m.max || m.running(l) < limit
}

func (m *model) keyOut(l int, key string) bool {
	return key != "" && slices.ContainsFunc(m.out, func(mt modelTask) bool { return mt.queue == l && mt.key == key })
}

func (m *model) checkSame(want, got []Entry[int], what string) {
	for _, e := range got {
		m.checkAccepted(e, what)
	}
	var w, g []uint64
	for _, e := range want {
		w = append(w, e.Seq)
	}
	for _, e := range got {
		g = append(g, e.Seq)
	}
	require.Equal(m.t, w, g, "%s: the tasks, in acceptance order", what)
}

// check compares the scheduler's counts with the model's.
func (m *model) check() {
	require.Equal(m.t, len(m.wait), m.s.Waiting(), "waiting")
	reported := 0
	for _, mt := range m.out {
		if mt.key != "" || mt.queue > 0 {
			reported++
		}
	}
	require.Equal(m.t, reported, m.s.Reported(), "tasks out whose end the loop must hear of")
	for l, q := range m.queues {
		var waiting, held int
		keys := map[string]bool{}
		for _, mt := range m.wait {
			if mt.queue == l {
				waiting++
				if mt.key != "" {
					keys[mt.key] = true
					if m.keyOut(l, mt.key) {
						held++
					}
				}
			}
		}
		for _, mt := range m.out {
			if mt.queue == l && mt.key != "" {
				keys[mt.key] = true
			}
		}
		require.Equal(m.t, waiting, q.Waiting(), "queue %d waiting", l)
		require.Equal(m.t, m.running(l), q.Running(), "queue %d running", l)
		require.Equal(m.t, held, q.held, "queue %d held by keys", l)
		require.Len(m.t, q.keys, len(keys), "queue %d: a Key for each key waiting or out, and no other", l)
		require.Equal(m.t, held == 0, m.s.MayBuffer(q), "queue %d: its tasks may wait in the outbox unless a busy key holds one back", l)
		require.Equal(m.t, waiting > 0 && m.mayStart(l), q.inTurns, "queue %d is in the turns exactly when a task of it may start", l)
		out, lent := 0, 0
		for _, mt := range m.out {
			if mt.queue == l {
				out++
				if mt.lent && m.limits[l] > 0 {
					lent++
				}
			}
		}
		require.Equal(m.t, lent, q.Lent(), "queue %d lent", l)
		if m.limits[l] > 0 {
			require.Equal(m.t, waiting == 0 && out == 0, m.s.Idle(q), "queue %d idle", l)
		}
		if waiting > 0 {
			require.Equal(m.t, m.turn[l], q.turn, "queue %d's turn", l)
		}
	}
	require.Equal(m.t, len(m.wait) > 0 && !slices.ContainsFunc(m.turns(), m.mayStart), m.s.Stuck(), "stuck")
	var turns []int
	for _, q := range m.s.Queues() {
		turns = append(turns, slices.Index(m.queues, q))
	}
	require.Equal(m.t, m.turns(), turns, "the turns")
}
