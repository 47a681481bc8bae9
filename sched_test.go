package workerpool

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// schedRig drives a scheduler with tasks named by strings, so that tests
// can say which task went where.
type schedRig struct {
	t     *testing.T
	s     *scheduler
	lanes []*lane // lanes[0] is the pool's own
	names map[uint64]string
}

func newSchedRig(t *testing.T, max int, limits ...int) *schedRig {
	r := &schedRig{t: t, s: newScheduler(max), names: map[uint64]string{}}
	r.lanes = append(r.lanes, &r.s.own)
	for _, limit := range limits {
		r.lanes = append(r.lanes, &lane{owner: "sub-pool", limit: limit})
	}
	return r
}

// submit admits a task named name to lane i, keyed if key is not "", and
// queues it: the tests hand tasks out with next.
func (r *schedRig) submit(i int, key, name string) entry {
	e := r.s.admit(task{fn: func() {}}, r.lanes[i], key, key != "", 0)
	r.names[e.seq] = name
	r.s.wait(e)
	return e
}

// next hands out the next task and returns its entry, or fails.
func (r *schedRig) next() entry {
	r.t.Helper()
	_, ok := r.s.peek()
	require.True(r.t, ok, "a task may start")
	return r.s.take()
}

// order hands out n tasks, ending each before the next, and names them.
func (r *schedRig) order(n int) []string {
	var got []string
	for range n {
		e := r.next()
		got = append(got, r.names[e.seq])
		r.s.ended(e)
	}
	return got
}

func (r *schedRig) namesOf(es []entry) []string {
	var names []string
	for _, e := range es {
		names = append(names, r.names[e.seq])
	}
	return names
}

func TestSchedKeysHoldBackOnlyTheTasksOfABusyKey(t *testing.T) {
	r := newSchedRig(t, 1)
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
	assert.Equal(t, "A1", r.names[a1.seq])
	// A2 waits for A1; U3 and B1 do not.
	assert.Equal(t, "U3", r.names[r.next().seq])
	assert.Equal(t, "B1", r.names[r.next().seq])
	_, ok := r.s.peek()
	assert.False(t, ok, "A2 waits while A1 is out")
	assert.False(t, r.s.mayBuffer(&r.s.own), "none of its lane's tasks may wait ahead of A2")
	r.s.ended(a1)
	assert.Equal(t, "A2", r.names[r.next().seq])
}

func TestSchedAFreedKeyTakesItsPlaceInAcceptanceOrder(t *testing.T) {
	r := newSchedRig(t, 4)
	r.submit(0, "a", "A1")
	a1 := r.next()
	r.submit(0, "", "U1")
	r.submit(0, "a", "A2") // held by A1
	r.submit(0, "", "U2")
	r.s.ended(a1)
	assert.Equal(t, []string{"U1", "A2", "U2"}, r.order(3))
}

func TestSchedLanesTakeTurnsAndALaneAtItsLimitKeepsItsPlace(t *testing.T) {
	r := newSchedRig(t, 4, 1, 4) // lanes: own, A (limit 1), B
	for i := range 3 {
		r.submit(0, "", fmt.Sprint("P", i))
		r.submit(1, "", fmt.Sprint("A", i))
		r.submit(2, "", fmt.Sprint("B", i))
	}
	var got []string
	var a entry
	for range 5 {
		e := r.next()
		got = append(got, r.names[e.seq])
		if e.lane == r.lanes[1] {
			a = e // A's one place: held
		} else {
			r.s.ended(e)
		}
	}
	assert.Equal(t, []string{"P0", "A0", "B0", "P1", "B1"}, got, "A at its limit is passed over")
	r.s.ended(a)
	assert.Equal(t, "A1", r.names[r.next().seq], "A kept its place: its turn comes first")
}

func TestSchedALimitAtOrAboveTheMaximumHoldsNothingBack(t *testing.T) {
	r := newSchedRig(t, 2, 2)
	r.submit(1, "", "A0")
	r.submit(1, "", "A1")
	r.submit(1, "", "A2")
	r.next()
	r.next()
	_, ok := r.s.peek()
	assert.True(t, ok, "the pool's maximum holds back A's third task, not A's limit")
	r.s.setMax(4)
	_, ok = r.s.peek()
	assert.False(t, ok, "below the maximum, the limit binds")
}

func TestSchedDropAllReturnsTasksInAcceptanceOrder(t *testing.T) {
	r := newSchedRig(t, 1, 1)
	r.submit(0, "", "P1")
	r.submit(1, "", "S1")
	r.submit(0, "k", "K1")
	r.submit(0, "", "P2")
	r.submit(1, "j", "J1")
	r.submit(1, "", "S2")
	r.submit(0, "k", "K2")
	assert.Equal(t, []string{"P1", "S1", "K1", "P2", "J1", "S2", "K2"}, r.namesOf(r.s.dropAll()))
	assert.Zero(t, r.s.waiting)
	assert.Empty(t, r.lanes[0].keys, "a key with nothing waiting or out costs nothing")
}

func TestSchedPutBackRestoresTheOrder(t *testing.T) {
	r := newSchedRig(t, 4, 4)
	r.submit(0, "", "P1")
	r.submit(0, "a", "A1")
	r.submit(1, "", "S1")
	r.submit(0, "", "P2")
	r.submit(0, "a", "A2")
	r.submit(1, "", "S2")
	var out []entry
	var turns []int64
	for range 3 {
		e, _ := r.s.peek()
		turns = append(turns, e.lane.turn)
		out = append(out, r.next())
	}
	assert.Equal(t, []string{"P1", "S1", "A1"}, r.namesOf(out))
	r.s.putBack(out, turns)
	assert.Equal(t, []string{"P1", "S1", "A1", "S2", "P2", "A2"}, r.order(6))
}

// FuzzSched drives the scheduler alone with operations decoded from the
// input, and checks every answer against a model that keeps every task in
// one list and every lane's turn as a number: the next task is the first,
// in the order of the lanes' turns, of the lanes under their limit, of
// that lane's tasks whose key is free.
func FuzzSched(f *testing.F) {
	f.Add([]byte{0x00, 0x10, 0x21, 0x03, 0x04, 0x05, 0x13, 0x06})
	f.Add([]byte{0x30, 0x41, 0x52, 0x60, 0x03, 0x03, 0x07, 0x08, 0x04, 0x03})
	f.Add([]byte{0x01, 0x01, 0x11, 0x22, 0x32, 0x03, 0x03, 0x09, 0x0a, 0x03, 0x05})
	f.Add([]byte{0x00, 0x00, 0x00, 0x10, 0x00, 0x1a, 0x0a, 0x03, 0x2a, 0x06, 0x03, 0x0b})
	f.Add([]byte{0x01, 0x00, 0x01, 0x11, 0x22, 0x03, 0x03, 0x0c, 0x03, 0x1c, 0x09})
	f.Add([]byte{0x01, 0x01, 0x11, 0x21, 0x01, 0x11, 0x03, 0x03, 0x03, 0x04, 0x14, 0x03, 0x05})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newSchedModel(t, data)
		if len(data) == 0 {
			return
		}
		for _, b := range data[1:] {
			m.step(b)
		}
		m.step(opSchedDropAll)
	})
}

// The operations of FuzzSched, one byte each: the low 4 bits select it,
// the high 4 bits are its argument.
const (
	opSchedSubmit   = iota // submit to lane arg%3, key arg/3%3 (0: none)
	opSchedSubmit2         // the same, another spread of keys
	opSchedStartNow        // submit as the loop does: start it if startsNow, else wait
	opSchedTake            // hand out the next task
	opSchedEnd             // end the arg-th task out
	opSchedPutBack         // put back the last 1+arg%3 tasks handed out, if none ended since
	opSchedDropLane        // drop lane arg%3
	opSchedSetMax          // set the maximum to 1+arg%4
	opSchedSetLimit        // set a sub-pool's limit to 1+arg/2%4
	opSchedTakeAll         // hand out every task that may start
	opSchedCancel          // cancel the arg-th unkeyed task: waiting ones leave, those out stay
	opSchedDropAll
	opSchedLeave // the arg-th task out leaves before it started: its lane gets its turn back
)

type schedModel struct {
	t     *testing.T
	s     *scheduler
	lanes []*lane
	turn  []int64     // each lane's turn, while it has waiting tasks
	back  int64       // the next turn to give
	wait  []modelTask // waiting, in acceptance order
	out   []modelTask // handed out, in that order
	// sinceTake is how many tasks were handed out since an end, a drop or
	// a put back, which putBack may return.
	sinceTake int
	limits    []int
	max       int
	timed     bool // entries carry a time: the scheduler keeps it with them
}

// acceptedAt is the time a timed model gives the task numbered seq.
func (m *schedModel) acceptedAt(seq uint64) int64 {
	if !m.timed {
		return 0
	}
	return int64(seq)*10 + 1
}

// checkAccepted checks that e kept the time it was admitted with.
func (m *schedModel) checkAccepted(e entry, what string) {
	require.Equal(m.t, m.acceptedAt(e.seq), e.accepted, "%s: task %d's time", what, e.seq)
}

type modelTask struct {
	e    entry
	lane int
	key  string
	turn int64 // the turn its lane took for it, once out
}

func newSchedModel(t *testing.T, data []byte) *schedModel {
	max := 1
	if len(data) > 0 {
		max = 1 + int(data[0]%4)
	}
	m := &schedModel{t: t, s: newScheduler(max), max: max, limits: []int{0, 1, 2}, turn: make([]int64, 3), back: 1}
	m.timed = len(data) > 0 && data[0]&0x10 != 0
	m.lanes = []*lane{&m.s.own, {owner: "A", limit: 1}, {owner: "B", limit: 2}}
	return m
}

// nextTurn gives the next turn, as the scheduler does.
func (m *schedModel) nextTurn() int64 {
	m.back++
	return m.back - 1
}

// waits reports whether lane l has waiting tasks.
func (m *schedModel) waits(l int) bool {
	return slices.ContainsFunc(m.wait, func(x modelTask) bool { return x.lane == l })
}

// mayStart reports whether lane l has a task that may start.
func (m *schedModel) mayStart(l int) bool {
	if !m.underLimit(l) {
		return false
	}
	return slices.ContainsFunc(m.wait, func(mt modelTask) bool { return mt.lane == l && !m.keyOut(l, mt.key) })
}

func (m *schedModel) step(b byte) {
	op, arg := int(b&15), int(b>>4)
	before := make([]bool, len(m.lanes)) // lanes passed over before the step
	for l := range m.lanes {
		before[l] = m.waits(l) && !m.mayStart(l)
	}
	m.s.rejoined = false
	switch op {
	case opSchedSubmit, opSchedSubmit2, opSchedStartNow:
		l, key := arg%3, ""
		if k := arg / 3 % 3; k > 0 {
			key = fmt.Sprint("k", k+op)
		}
		e := m.s.admit(task{fn: func() {}}, m.lanes[l], key, key != "", m.acceptedAt(m.s.seq+1))
		mt := modelTask{e: e, lane: l, key: key}
		if op == opSchedStartNow {
			want := len(m.wait) == 0 && m.underLimit(l) && !m.keyOut(l, key)
			require.Equal(m.t, want, m.s.startsNow(e), "startsNow")
			if want {
				// The loop gives a task handed out without waiting a turn.
				require.Equal(m.t, m.nextTurn(), m.s.nextTurn(), "nextTurn")
				mt.turn = m.back - 1
				m.s.start(e)
				m.out = append(m.out, mt)
				m.sinceTake = 0
				break
			}
		}
		if !m.waits(l) {
			m.turn[l] = m.nextTurn()
		}
		m.s.wait(e)
		m.wait = append(m.wait, mt)
	case opSchedTake:
		m.take()
	case opSchedTakeAll:
		for m.take() {
		}
	case opSchedEnd:
		if len(m.out) == 0 {
			return
		}
		i := arg % len(m.out)
		m.s.ended(m.out[i].e)
		m.out = slices.Delete(m.out, i, i+1)
		m.sinceTake = 0
	case opSchedPutBack:
		n := min(1+arg%3, m.sinceTake)
		if n == 0 {
			return
		}
		back := m.out[len(m.out)-n:]
		m.out = m.out[:len(m.out)-n]
		var es []entry
		var turns []int64
		for _, mt := range back {
			es = append(es, mt.e)
			turns = append(turns, mt.turn)
		}
		m.s.putBack(es, turns)
		for _, mt := range slices.Backward(back) {
			if !m.waits(mt.lane) || mt.turn < m.turn[mt.lane] {
				m.turn[mt.lane] = mt.turn
			}
			m.wait = slices.Insert(m.wait, 0, mt)
		}
		slices.SortStableFunc(m.wait, func(a, b modelTask) int { return bySeq(a.e, b.e) })
		m.sinceTake -= n
	case opSchedDropLane:
		l := arg % 3
		got := m.s.dropLane(m.lanes[l])
		var want []entry
		m.wait = slices.DeleteFunc(m.wait, func(mt modelTask) bool {
			if mt.lane == l {
				want = append(want, mt.e)
			}
			return mt.lane == l
		})
		m.checkSame(want, got, "dropLane")
		m.sinceTake = 0
	case opSchedSetMax:
		m.max = 1 + arg%4
		m.s.setMax(m.max)
	case opSchedSetLimit:
		l := 1 + arg%2
		m.limits[l] = 1 + arg/2%4
		m.s.setLimit(m.lanes[l], m.limits[l])
	case opSchedCancel:
		// Only a waiter is given up on, and SubmitKey takes funcs: a
		// cancelled task is never keyed.
		all := slices.DeleteFunc(append(append([]modelTask{}, m.wait...), m.out...), func(x modelTask) bool { return x.key != "" })
		if len(all) == 0 {
			return
		}
		mt := all[arg%len(all)]
		waiting := slices.IndexFunc(m.wait, func(x modelTask) bool { return x.e.seq == mt.e.seq })
		want := waiting >= 0
		require.Equal(m.t, want, m.s.cancel(m.lanes[mt.lane], mt.e.seq), "cancel: only a waiting task leaves")
		require.False(m.t, m.s.cancel(m.lanes[mt.lane], mt.e.seq), "cancel: a task leaves once")
		if want {
			m.wait = slices.Delete(m.wait, waiting, waiting+1)
			m.sinceTake = 0
		}
	case opSchedLeave:
		if len(m.out) == 0 {
			return
		}
		i := arg % len(m.out)
		mt := m.out[i]
		m.s.left(mt.e, mt.turn)
		m.out = slices.Delete(m.out, i, i+1)
		if m.waits(mt.lane) && mt.turn < m.turn[mt.lane] {
			m.turn[mt.lane] = mt.turn
		}
		m.sinceTake = 0
	case opSchedDropAll:
		got := m.s.dropAll()
		var want []entry
		for _, mt := range m.wait {
			want = append(want, mt.e)
		}
		m.checkSame(want, got, "dropAll")
		m.wait, m.sinceTake = nil, 0
	}
	m.check()
	// A lane passed over that may start again, at the turn it kept: the
	// loop must hear of it, to take back what was handed out after that
	// turn. (Put backs and new waits move lanes themselves.)
	if op != opSchedPutBack {
		for l := range m.lanes {
			if before[l] && m.waits(l) && m.mayStart(l) {
				require.True(m.t, m.s.rejoined, "lane %d went back into the turns: the loop hears of it", l)
				require.LessOrEqual(m.t, m.s.lowJoin, m.turn[l], "lane %d's turn is at least the lowest rejoined", l)
			}
		}
	}
}

// take hands out the next task, checks it is the model's, and reports
// whether there was one.
func (m *schedModel) take() bool {
	want, ok := m.next()
	e, got := m.s.peek()
	require.Equal(m.t, ok, got, "peek: a task may start")
	if !ok {
		return false
	}
	require.Equal(m.t, m.wait[want].e.seq, e.seq, "peek: the next task")
	m.checkAccepted(e, "peek")
	require.Equal(m.t, m.turn[m.wait[want].lane], e.lane.turn, "peek: the turn it takes")
	taken := m.s.take()
	m.checkAccepted(taken, "take")
	require.Equal(m.t, e.seq, taken.seq, "take hands out what peek returned")
	mt := m.wait[want]
	mt.turn = m.turn[mt.lane]
	m.wait = slices.Delete(m.wait, want, want+1)
	m.out = append(m.out, mt)
	m.sinceTake++
	m.turn[mt.lane] = m.nextTurn()
	return true
}

// ring returns the lanes with waiting tasks, in the order of their turns.
func (m *schedModel) ring() []int {
	var ring []int
	for l := range m.lanes {
		if m.waits(l) {
			ring = append(ring, l)
		}
	}
	slices.SortFunc(ring, func(a, b int) int { return cmp64(m.turn[a], m.turn[b]) })
	return ring
}

// next returns the index in m.wait of the task to go next.
func (m *schedModel) next() (int, bool) {
	for _, l := range m.ring() {
		if !m.underLimit(l) {
			continue
		}
		for i, mt := range m.wait {
			if mt.lane == l && !m.keyOut(l, mt.key) {
				return i, true
			}
		}
	}
	return 0, false
}

func (m *schedModel) underLimit(l int) bool {
	limit := m.limits[l]
	if limit == 0 || limit >= m.max {
		return true
	}
	n := 0
	for _, mt := range m.out {
		if mt.lane == l {
			n++
		}
	}
	return n < limit
}

func (m *schedModel) keyOut(l int, key string) bool {
	return key != "" && slices.ContainsFunc(m.out, func(mt modelTask) bool { return mt.lane == l && mt.key == key })
}

func (m *schedModel) checkSame(want, got []entry, what string) {
	for _, e := range got {
		m.checkAccepted(e, what)
	}
	var w, g []uint64
	for _, e := range want {
		w = append(w, e.seq)
	}
	for _, e := range got {
		g = append(g, e.seq)
	}
	require.Equal(m.t, w, g, "%s: the tasks, in acceptance order", what)
}

// check compares the scheduler's counts with the model's.
func (m *schedModel) check() {
	require.Equal(m.t, len(m.wait), m.s.waiting, "waiting")
	for l, ln := range m.lanes {
		var waiting, out, inLines int
		keys := map[string]bool{}
		for _, mt := range m.wait {
			if mt.lane == l {
				waiting++
				if mt.key != "" {
					keys[mt.key] = true
					if m.keyOut(l, mt.key) {
						inLines++
					}
				}
			}
		}
		for _, mt := range m.out {
			if mt.lane == l {
				out++
				if mt.key != "" {
					keys[mt.key] = true
				}
			}
		}
		require.Equal(m.t, waiting, ln.waiting, "lane %d waiting", l)
		require.Equal(m.t, out, ln.running, "lane %d out", l)
		require.Equal(m.t, inLines, ln.held, "lane %d held by keys", l)
		require.Len(m.t, ln.keys, len(keys), "lane %d: a line for each key waiting or out, and no other", l)
		holds := slices.ContainsFunc(m.wait, func(mt modelTask) bool { return mt.lane == l && m.keyOut(l, mt.key) })
		require.Equal(m.t, !holds, m.s.mayBuffer(ln), "lane %d: its tasks may wait in the buffer unless a busy key holds one back", l)
		require.Equal(m.t, waiting > 0 && m.mayStart(l), ln.inTurns, "lane %d is in the turns exactly when a task of it may start", l)
		if waiting > 0 {
			require.Equal(m.t, m.turn[l], ln.turn, "lane %d's turn", l)
		}
	}
	var ring []int
	for _, l := range m.s.ring() {
		ring = append(ring, slices.Index(m.lanes, l))
	}
	require.Equal(m.t, m.ring(), ring, "the turns")
}
