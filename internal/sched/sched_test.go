package sched

import (
	"fmt"
	"os"
	"slices"
	"strings"
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
	e := r.s.Admit(Task[int]{Fn: func() {}}, r.queues[i], key, key != "", 0, r.seq, 0)
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
	New[int](1).push(Entry[int]{Task: Task[int]{Fn: func() {}}, Queue: q, Seq: 7})
	f := &q.levels[0].fifo
	assert.Equal(t, 1, len(f.fns.buf), "one func slot")
	assert.Equal(t, 1, len(f.seqs.gaps.buf), "one gap slot")
	assert.Zero(t, len(f.waiters.buf), "no waiter slot for a func")
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
// input, time among them, and checks every answer against a model that
// keeps every task in one list, every queue's turn as a number of parts
// of a round, and every bucket as the tokens it holds (in nanoseconds of
// refill): the next task is, in the order of the queues' turns, of the
// first queue under its limit whose rate holds a token (if the pool's
// does), that queue's task of the highest level, accepted first, among
// those unkeyed or first of a key that is free and holds a token.
func FuzzSched(f *testing.F) {
	f.Add([]byte{0x00, 0x10, 0x21, 0x03, 0x04, 0x05, 0x13, 0x06})
	f.Add([]byte{0x30, 0x41, 0x52, 0x60, 0x03, 0x03, 0x07, 0x08, 0x04, 0x03})
	f.Add([]byte{0x01, 0x01, 0x11, 0x22, 0x32, 0x03, 0x03, 0x09, 0x0a, 0x03, 0x05})
	f.Add([]byte{0x00, 0x00, 0x00, 0x10, 0x00, 0x1a, 0x0a, 0x03, 0x2a, 0x06, 0x03, 0x0b})
	f.Add([]byte{0x01, 0x00, 0x01, 0x11, 0x22, 0x03, 0x03, 0x0c, 0x03, 0x1c, 0x09})
	f.Add([]byte{0x01, 0x01, 0x11, 0x21, 0x01, 0x11, 0x03, 0x03, 0x03, 0x04, 0x14, 0x03, 0x05})
	f.Add([]byte{0x00, 0x11, 0x11, 0x41, 0x03, 0x0d, 0x03, 0x0e, 0x04, 0x03, 0x03})
	// Rates, levels, weights and time.
	f.Add([]byte{0x03, 16, 17, 0, 19, 38, 18, 18, 3, 3, 3, 15, 15 + 19*5, 3, 3, 4, 3})
	f.Add([]byte{0x02, 17, 17 + 19, 17 + 38, 0, 1, 2, 19, 20, 21, 9, 9, 4, 4, 15 + 19*12, 9, 15 + 19*12, 9})
	f.Add([]byte{0x01, 16 + 19*3, 16 + 19*10, 3, 22, 41, 3, 3, 3, 3, 15 + 19*4, 3, 5, 15 + 19*9, 3, 12, 3})
	f.Add([]byte{0x13, 16 + 19*7, 2, 2, 21, 18, 18 + 19, 9, 4, 4, 15 + 19*7, 9, 5, 4, 15 + 19*7, 9, 11})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxOps {
			data = data[:maxOps]
		}
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

// maxOps is the most operations FuzzSched runs of an input: the model
// takes time quadratic in the tasks at each step, and a longer input finds
// nothing a few of these do not, only slower.
const maxOps = 400

// The operations of FuzzSched, one byte each: the byte modulo numOps
// selects it, the byte divided by numOps (0 to 13) is its argument.
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
	opTick    // time passes: arg nanoseconds
	opRate    // set a rate: of the pool, a queue, or a queue's keys (arg%7), to one of rateShapes
	opLevel   // submit as opSubmit, at level 1 or 2
	opWeight  // set queue arg%3's weight to 1+arg/3%4
	numOps
)

// rateShapes are the rates opRate sets, in turn: none, and small ones,
// so that time makes a difference within a few operations.
var rateShapes = []Rate{{}, {Interval: 4, Burst: 1}, {Interval: 7, Burst: 2}, {Interval: 3, Burst: 3}}

type model struct {
	t      *testing.T
	s      *Scheduler[int]
	queues []*Queue[int]
	turn   []modelTurn // each queue's turn, while it has waiting tasks
	now    int64       // the latest turn taken, in parts of a round
	given  uint32      // the turns given
	stride []int64     // each queue's parts per turn
	seq    uint64      // the last seq given
	wait   []modelTask // waiting, in acceptance order
	out    []modelTask // handed out, in that order
	// sinceTake is how many tasks were handed out since an end, a drop, a
	// loan or a put back, which a put back may return.
	sinceTake int
	limits    []int
	max       int
	timed     bool // entries carry a time: the scheduler keeps it with them
	// Time and buckets: clock is the time; pool, queue[l] and keys[l][key]
	// the buckets, nil for no rate (a key missing from keys has a full
	// bucket); keyRate[l] the rate of queue l's keys.
	clock   int64
	pool    *modelBucket
	queue   []*modelBucket
	keyRate []Rate
	keys    []map[string]*modelBucket
	rates   int // rates set so far, to vary the shapes
}

// A modelTurn is a turn as the model keeps it: parts of a round, and the
// order given.
type modelTurn struct {
	at int64
	n  uint32
}

func (a modelTurn) before(b modelTurn) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return int32(a.n-b.n) < 0
}

func (a modelTurn) turn() Turn {
	return Turn{Round: a.at / roundParts, Part: uint32(a.at % roundParts), N: a.n}
}

// A modelBucket is a bucket as the tokens it holds, in nanoseconds of
// refill (a token is r.Interval of them), at a time.
type modelBucket struct {
	r     Rate
	level int64
	at    int64
}

// fill brings b's level to now.
func (b *modelBucket) fill(now int64) {
	b.level = min(b.level+now-b.at, b.r.Burst*b.r.Interval)
	b.at = now
}

func (b *modelBucket) has(now int64) bool {
	if b == nil {
		return true
	}
	b.fill(now)
	return b.level >= b.r.Interval
}

// readyAt returns when b holds a token.
func (b *modelBucket) readyAt(now int64) int64 {
	b.fill(now)
	return now + max(b.r.Interval-b.level, 0)
}

type modelTask struct {
	e     Entry[int]
	queue int
	key   string
	level int32
	lent  bool
	took  Tokens // the buckets it took a token from
}

func newModel(t *testing.T, data []byte) *model {
	max := 1
	if len(data) > 0 {
		max = 1 + int(data[0]%4)
	}
	m := &model{t: t, s: New[int](max), max: max, limits: []int{0, 1, 2}, turn: make([]modelTurn, 3),
		stride: []int64{roundParts, roundParts, roundParts}, clock: 1,
		queue: make([]*modelBucket, 3), keyRate: make([]Rate, 3), keys: []map[string]*modelBucket{{}, {}, {}}}
	m.timed = len(data) > 0 && data[0]&0x10 != 0
	m.queues = []*Queue[int]{m.s.Own(), NewQueue[int]("A", 1), NewQueue[int]("B", 2)}
	m.s.SetNow(m.clock)
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

// nextTurn gives queue l its next turn, as the scheduler does: a stride on
// from the latest turn taken.
func (m *model) nextTurn(l int) modelTurn {
	t := modelTurn{at: m.now + m.stride[l], n: m.given}
	m.given++
	return t
}

// waits reports whether queue l has waiting tasks.
func (m *model) waits(l int) bool {
	return slices.ContainsFunc(m.wait, func(x modelTask) bool { return x.queue == l })
}

// keyBucket returns the bucket of queue l's key, nil if it has no rate.
func (m *model) keyBucket(l int, key string) *modelBucket {
	if m.keyRate[l].None() {
		return nil
	}
	b := m.keys[l][key]
	if b == nil {
		r := m.keyRate[l]
		b = &modelBucket{r: r, level: r.Burst * r.Interval, at: m.clock}
		m.keys[l][key] = b
	}
	return b
}

// keyHeld reports whether key of queue l holds its tasks back: a task
// with it is out, or its rate has no token.
func (m *model) keyHeld(l int, key string) bool {
	return key != "" && (m.keyOut(l, key) || !m.keyBucket(l, key).has(m.clock))
}

// keyPaced reports whether key of queue l waits for a token: free, with a
// task waiting, and its bucket empty.
func (m *model) keyPaced(l int, key string) bool {
	return key != "" && !m.keyOut(l, key) && !m.keyBucket(l, key).has(m.clock) &&
		slices.ContainsFunc(m.wait, func(x modelTask) bool { return x.queue == l && x.key == key })
}

// ready returns the indexes in m.wait of queue l's tasks that no key holds
// back: unkeyed ones, and the first of each free key with a token.
func (m *model) ready(l int) []int {
	var is []int
	seen := map[string]bool{}
	for i, mt := range m.wait {
		if mt.queue != l {
			continue
		}
		if mt.key != "" {
			if seen[mt.key] {
				continue
			}
			seen[mt.key] = true
			if m.keyHeld(l, mt.key) {
				continue
			}
		}
		is = append(is, i)
	}
	return is
}

// placeOf returns where queue l belongs, as the scheduler's placeOf says.
func (m *model) placeOf(l int) place {
	switch {
	case !m.waits(l):
		return nowhere
	case len(m.ready(l)) == 0 || !m.underLimit(l):
		return aside
	case !m.queue[l].has(m.clock):
		return paced
	}
	return inTurns
}

// mayStart reports whether queue l has a task that may start, but for the
// pool's rate.
func (m *model) mayStart(l int) bool { return m.placeOf(l) == inTurns }

func (m *model) step(b byte) {
	op, arg := int(b)%numOps, int(b)/numOps
	if os.Getenv("SCHED_TRACE") != "" {
		m.t.Logf("op %d arg %d (clock %d)", op, arg, m.clock)
	}
	before := make([]bool, len(m.queues)) // queues passed over before the step
	for l := range m.queues {
		before[l] = m.waits(l) && !m.mayStart(l)
	}
	m.s.Rejoined() // forget what came before
	switch op {
	case opSubmit, opSubmit2, opStartNow, opLevel:
		l, key := arg%3, ""
		if k := arg / 3 % 3; k > 0 {
			key = fmt.Sprint("k", k+op%3)
		}
		var level int32
		if op == opLevel {
			level = int32(1 + m.seq%2)
		}
		m.seq++
		e := m.s.Admit(Task[int]{Fn: func() {}}, m.queues[l], key, key != "", level, m.seq, m.acceptedAt(m.seq))
		mt := modelTask{e: e, queue: l, key: key, level: level}
		if op == opStartNow {
			want := len(m.wait) == 0 && m.underLimit(l) && !m.keyHeld(l, key) && m.pool.has(m.clock) && m.queue[l].has(m.clock)
			require.Equal(m.t, want, m.s.StartsNow(e), "StartsNow")
			if want {
				// The loop gives a task handed out without waiting a turn.
				turn := m.nextTurn(l)
				require.Equal(m.t, turn.turn(), m.s.NextTurn(m.queues[l]), "NextTurn")
				mt.e.Turn = turn.turn()
				m.s.Start(mt.e)
				m.takeTokens(&mt)
				require.Equal(m.t, mt.took, mt.e.Tokens, "the tokens a task takes")
				m.out = append(m.out, mt)
				m.sinceTake = 0
				break
			}
		}
		if !m.waits(l) {
			m.turn[l] = m.nextTurn(l)
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
			m.refund(mt)
			if !m.waits(mt.queue) || mt.e.Turn.Before(m.turn[mt.queue].turn()) {
				m.turn[mt.queue] = modelTurn{at: mt.e.Turn.Round*roundParts + int64(mt.e.Turn.Part), n: mt.e.Turn.N}
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
		require.Equal(m.t, want, m.s.Cancel(m.queues[mt.queue], mt.level, mt.e.Seq), "Cancel: only a waiting task leaves")
		require.False(m.t, m.s.Cancel(m.queues[mt.queue], mt.level, mt.e.Seq), "Cancel: a task leaves once")
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
		m.refund(mt)
		m.out = slices.Delete(m.out, i, i+1)
		if m.waits(mt.queue) && mt.e.Turn.Before(m.turn[mt.queue].turn()) {
			m.turn[mt.queue] = modelTurn{at: mt.e.Turn.Round*roundParts + int64(mt.e.Turn.Part), n: mt.e.Turn.N}
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
	case opTick:
		m.clock += int64(arg)
		m.s.SetNow(m.clock)
	case opRate:
		r := rateShapes[(arg/7+m.rates)%len(rateShapes)]
		m.rates++
		switch target := arg % 7; {
		case target == 0:
			m.pool = m.reshape(m.pool, r)
			m.s.SetRate(r)
		case target <= 3:
			l := target - 1
			m.queue[l] = m.reshape(m.queue[l], r)
			m.s.SetQueueRate(m.queues[l], r)
		default:
			l := target - 4
			// Every key waiting or out has a bucket of the old rate: full
			// unless it took from it.
			for _, mt := range slices.Concat(m.wait, m.out) {
				if mt.queue == l && mt.key != "" {
					m.keyBucket(l, mt.key)
				}
			}
			for key, b := range m.keys[l] {
				if m.keys[l][key] = m.reshape(b, r); r.None() {
					delete(m.keys[l], key)
				}
			}
			m.keyRate[l] = r
			m.s.SetKeyRate(m.queues[l], r)
		}
	case opWeight:
		l, w := arg%3, 1+arg/3%4
		m.stride[l] = roundParts / int64(w)
		m.queues[l].SetWeight(w)
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
				require.False(m.t, m.turn[l].turn().Before(low), "queue %d's turn is at least the lowest rejoined", l)
			}
		}
	}
}

// reshape returns bucket b changed to rate r: with the whole tokens it
// held, up to r's burst; full if it was full, or new; nil for no rate.
func (m *model) reshape(b *modelBucket, r Rate) *modelBucket {
	switch {
	case r.None():
		return nil
	case b == nil:
		return &modelBucket{r: r, level: r.Burst * r.Interval, at: m.clock}
	}
	b.fill(m.clock)
	if b.level == b.r.Burst*b.r.Interval {
		return &modelBucket{r: r, level: r.Burst * r.Interval, at: m.clock} // full stays full
	}
	tokens := min(b.level/b.r.Interval, r.Burst)
	return &modelBucket{r: r, level: tokens * r.Interval, at: m.clock}
}

// takeTokens takes a token for mt from every bucket that applies.
func (m *model) takeTokens(mt *modelTask) {
	take := func(b *modelBucket, t Tokens) {
		if b != nil {
			b.fill(m.clock)
			require.GreaterOrEqual(m.t, b.level, b.r.Interval, "a task starts only with a token")
			b.level -= b.r.Interval
			mt.took |= t
		}
	}
	take(m.pool, PoolToken)
	take(m.queue[mt.queue], QueueToken)
	if mt.key != "" {
		take(m.keyBucket(mt.queue, mt.key), KeyToken)
	}
}

// refund gives back the tokens mt took, to the buckets of those rates
// that are still there.
func (m *model) refund(mt modelTask) {
	give := func(b *modelBucket, t Tokens) {
		if b != nil && mt.took&t != 0 {
			b.fill(m.clock)
			b.level = min(b.level+b.r.Interval, b.r.Burst*b.r.Interval)
		}
	}
	give(m.pool, PoolToken)
	give(m.queue[mt.queue], QueueToken)
	if mt.key != "" {
		give(m.keyBucket(mt.queue, mt.key), KeyToken)
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
	require.Equal(m.t, m.wait[want].level, e.Level, "Peek: its level")
	require.Equal(m.t, m.turn[m.wait[want].queue].turn(), e.Turn, "Peek: the turn it takes")
	taken := m.s.Take()
	m.checkAccepted(taken, "Take")
	require.Equal(m.t, e.Seq, taken.Seq, "Take hands out what Peek returned")
	require.Equal(m.t, e.Turn, taken.Turn, "Take gives the turn Peek said")
	require.Equal(m.t, e.Tokens, taken.Tokens, "Take takes the tokens Peek said")
	mt := m.wait[want]
	mt.e, mt.took = taken, 0
	m.takeTokens(&mt)
	require.Equal(m.t, mt.took, taken.Tokens, "the tokens a task takes")
	m.wait = slices.Delete(m.wait, want, want+1)
	m.out = append(m.out, mt)
	m.sinceTake++
	l := mt.queue
	m.now = max(m.now, m.turn[l].at)
	m.turn[l] = m.nextTurn(l)
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
	slices.SortFunc(turns, func(a, b int) int {
		switch {
		case m.turn[a].before(m.turn[b]):
			return -1
		case m.turn[b].before(m.turn[a]):
			return 1
		}
		return 0
	})
	return turns
}

// next returns the index in m.wait of the task to go next.
func (m *model) next() (int, bool) {
	if !m.pool.has(m.clock) {
		return 0, false
	}
	for _, l := range m.turns() {
		if !m.mayStart(l) {
			continue
		}
		best := -1
		for _, i := range m.ready(l) {
			if best < 0 || m.wait[i].level > m.wait[best].level {
				best = i // the first of the highest level: m.wait is in acceptance order
			}
		}
		return best, true
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
	anyPaced, pacedAll := false, 0
	nextStart, hasNext := int64(0), false
	noteStart := func(at int64) {
		if !hasNext || at < nextStart {
			nextStart, hasNext = at, true
		}
	}
	for l, q := range m.queues {
		var waiting, held, heldBusy int
		keys := map[string]bool{}
		for _, mt := range m.wait {
			if mt.queue == l {
				waiting++
				if mt.key != "" {
					keys[mt.key] = true
					if m.keyHeld(l, mt.key) {
						held++
					}
					if m.keyOut(l, mt.key) {
						heldBusy++
					}
				}
			}
		}
		for _, mt := range m.out {
			if mt.queue == l && mt.key != "" {
				keys[mt.key] = true
			}
		}
		for key := range m.keys[l] {
			if !m.keyBucket(l, key).has(m.clock) || m.keys[l][key].level < m.keyRate[l].Burst*m.keyRate[l].Interval {
				keys[key] = true // kept while its bucket fills
			}
		}
		require.Equal(m.t, waiting, q.Waiting(), "queue %d waiting", l)
		require.Equal(m.t, m.running(l), q.Running(), "queue %d running", l)
		require.Equal(m.t, held, q.held, "queue %d held by keys", l)
		require.LessOrEqual(m.t, len(q.keys), len(keys), "queue %d: a Key for each key waiting, out, or filling, and no other", l)
		for key := range q.keys {
			if !keys[key] {
				// A key whose bucket filled up is forgotten lazily, at the
				// next SetNow.
				require.False(m.t, m.keyOut(l, key), "queue %d: key %s", l, key)
			}
		}
		rated := m.pool != nil || m.queue[l] != nil || !m.keyRate[l].None()
		require.Equal(m.t, held == 0 && !rated, m.s.MayBuffer(q), "queue %d: its tasks may wait in the outbox unless a key holds one back or a rate applies", l)
		place := m.placeOf(l)
		require.Equal(m.t, place, q.placed(), "queue %d's place (0 none, 1 aside, 2 paced, 3 in the turns)", l)
		nPaced := 0
		for key := range keys {
			if m.keyPaced(l, key) {
				anyPaced = true
				noteStart(m.keyBucket(l, key).readyAt(m.clock))
				for _, mt := range m.wait {
					if mt.queue == l && mt.key == key {
						nPaced++
					}
				}
			}
		}
		switch {
		case place == paced:
			anyPaced = true
			noteStart(m.queue[l].readyAt(m.clock))
			nPaced = waiting - heldBusy
		case place == inTurns && !m.pool.has(m.clock):
			nPaced = waiting - heldBusy
		}
		pacedAll += nPaced
		require.Equal(m.t, nPaced, m.s.Paced(q), "queue %d: tasks a rate holds back", l)
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
			require.Equal(m.t, m.turn[l].turn(), q.turn, "queue %d's turn", l)
		}
	}
	require.Equal(m.t, pacedAll, m.s.PacedAll(), "tasks a rate holds back, in all")
	inTurns := slices.ContainsFunc(m.turns(), m.mayStart)
	if inTurns && !m.pool.has(m.clock) {
		noteStart(m.pool.readyAt(m.clock))
	}
	at, ok := m.s.NextStart()
	require.Equal(m.t, hasNext, ok, "NextStart: a rate holds a task back")
	if ok {
		require.Equal(m.t, nextStart, at, "NextStart: when the first may start")
	}
	require.Equal(m.t, len(m.wait) > 0 && !inTurns && !anyPaced, m.s.Stuck(), "stuck")
	var turns []int
	for _, q := range m.s.Queues() {
		turns = append(turns, slices.Index(m.queues, q))
	}
	require.Equal(m.t, m.turns(), turns, "the turns")
}

func TestWeightedSharesStayWithinOneTaskOfTheIdealOver10000Turns(t *testing.T) {
	for _, weights := range [][]int{{1, 2, 3, 5}, {1, 1}, {3, 3, 4}, {7, 1, 1}, {1, 10, 100}, {2, 3}} {
		t.Run(fmt.Sprint(weights), func(t *testing.T) {
			s := New[int](4)
			queues := []*Queue[int]{s.Own()}
			for range weights[1:] {
				queues = append(queues, NewQueue[int]("sub-pool", 100))
			}
			total := 0
			for i, q := range queues {
				q.SetWeight(weights[i])
				total += weights[i]
			}
			seq := uint64(0)
			submit := func(q *Queue[int]) {
				seq++
				s.Wait(s.Admit(Task[int]{Fn: func() {}}, q, "", false, 0, seq, 0))
			}
			for _, q := range queues {
				for range 3 {
					submit(q)
				}
			}
			counts := make([]int, len(queues))
			for n := 1; n <= 10000; n++ {
				e := s.Take()
				s.Ended(e)
				submit(e.Queue) // every queue keeps tasks waiting
				counts[slices.Index(queues, e.Queue)]++
				for j, c := range counts {
					ideal := float64(n) * float64(weights[j]) / float64(total)
					// Within a round, a queue is ahead or behind by less
					// than its share of a round: one task, or, for a queue
					// far heavier than the others, its turns of one round
					// that fall between theirs.
					bound := max(1, float64(weights[j])/float64(total)*float64(len(queues)-1))
					require.InDelta(t, ideal, float64(c), bound+1e-9, "after %d turns, queue %d of weight %d: %d, ideal %.2f", n, j, weights[j], c, ideal)
					if n%total == 0 {
						require.InDelta(t, ideal, float64(c), 1, "after %d turns, a whole number of rounds, queue %d of weight %d: %d, ideal %.2f", n, j, weights[j], c, ideal)
					}
				}
			}
			for j, c := range counts {
				assert.InDelta(t, 10000*float64(weights[j])/float64(total), float64(c), 1, "queue %d of weight %d over 10,000 turns", j, weights[j])
			}
		})
	}
}

func TestWeightOneIsPlainRoundRobinAndAWeightIsSmooth(t *testing.T) {
	r := newRig(t, 4, 4, 4)
	r.queues[1].SetWeight(3)
	for i := range 8 {
		r.submit(0, "", fmt.Sprint("P", i))
		r.submit(1, "", fmt.Sprint("A", i))
		r.submit(2, "", fmt.Sprint("B", i))
	}
	got := strings.Join(r.order(10), " ")
	assert.Equal(t, "A0 A1 P0 B0 A2 A3 A4 P1 B1 A5", got, "A thrice for each of P and B, and never all at once")
}
