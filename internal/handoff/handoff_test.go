package handoff

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A sim is a worker goroutine of the model test: it runs the task it was
// given until the test tells it to finish, then asks Next for another.
type sim struct {
	seat    Seat[int]
	finish  chan struct{} // the test's go-ahead to end the task and ask Next
	got     chan got      // what Next returned
	task    int           // the task it runs, or -1
	parked  bool          // in Next, waiting for a task
	gone    bool          // exited
	since   uint64        // the model's stamp, while parked
	started bool          // it ran a task since it last asked Next
}

type got struct {
	task int
	ok   bool
}

// model is the hand-off as the test expects it to be.
type model struct {
	t       *testing.T
	h       *Handoff[int]
	wake    chan struct{}
	sims    []*sim
	outbox  []int
	parked  []*sim
	max     int
	workers int
	running int
	ends    []int
	next    int // the next task's number
	given   map[int]bool
	started map[int]int // task -> how many times a worker got it
	back    map[int]bool
	closed  bool
	tick    uint64
	ticked  [4]time.Time
	depth   int
	min     int
	timeout time.Duration
}

const testTimeout = time.Second

func newModel(t *testing.T, depth, max, min int) *model {
	m := &model{t: t, wake: make(chan struct{}, 1), max: max, depth: depth, min: min, timeout: testTimeout,
		given: map[int]bool{}, started: map[int]int{}, back: map[int]bool{}}
	m.h = New[int](depth, max, min, testTimeout, m.wake)
	return m
}

// startSim starts a worker goroutine with task (or none: -1).
func (m *model) startSim(task int) {
	s := &sim{finish: make(chan struct{}), got: make(chan got, 1), task: task, started: task >= 0}
	m.sims = append(m.sims, s)
	if task >= 0 {
		m.started[task]++
	}
	go func() {
		ran := task >= 0
		cur := task
		for {
			if ran {
				<-s.finish
			}
			report := ran && cur%2 == 0
			end := cur
			t, ok := m.h.Next(&s.seat, ran, &end, report)
			s.got <- got{t, ok}
			if !ok {
				return
			}
			ran, cur = true, t
		}
	}()
	if task < 0 {
		m.settle(s) // it asks Next at once
	}
}

// settle waits for s's call of Next to return or park, and brings the
// model up to date.
func (m *model) settle(s *sim) {
	synctest.Wait()
	select {
	case g := <-s.got:
		s.parked = false
		if !g.ok {
			s.gone, s.task = true, -1
			return
		}
		s.task = g.task
		m.started[g.task]++
	default:
		s.parked = true
		s.task = -1
	}
}

// expectNext is the model's Next for sim s: what it should get.
func (m *model) expectNext(s *sim) (task int, ok, parks bool) {
	switch {
	case m.workers > m.max:
		m.workers--
		return 0, false, false
	case len(m.outbox) > 0:
		t := m.outbox[0]
		m.outbox = m.outbox[1:]
		m.running++
		return t, true, false
	case m.closed:
		m.workers--
		return 0, false, false
	}
	s.since = m.tick
	m.parked = append(m.parked, s)
	return 0, false, true
}

func (m *model) busy() []*sim {
	var b []*sim
	for _, s := range m.sims {
		if !s.gone && !s.parked && s.task >= 0 {
			b = append(b, s)
		}
	}
	return b
}

func (m *model) quitFront() *sim {
	s := m.parked[0]
	m.parked = m.parked[1:]
	m.workers--
	return s
}

// step carries out one operation, decoded from b, on the hand-off and on
// the model, and checks that they agree.
func (m *model) step(b byte) {
	op, arg := b&7, int(b>>3)
	switch op {
	case 0, 1: // give a task; op 1: direct
		task := m.next
		m.next++
		direct := op == 1
		g := m.h.Give(task, direct)
		switch {
		case direct && len(m.ends) > 0:
			require.Equal(m.t, Full, g, "give %d: direct, with ends the loop has not taken", task)
			return
		case len(m.parked) > 0:
			require.Equal(m.t, Parked, g, "give %d: to the longest parked", task)
			s := m.parked[0]
			m.parked = m.parked[1:]
			m.running++
			m.settle(s)
			require.Equal(m.t, task, s.task, "the longest parked worker got it")
		case m.workers < m.max && len(m.outbox) == 0:
			require.Equal(m.t, Start, g, "give %d: to a new worker", task)
			m.workers++
			m.running++
			m.startSim(task)
		case !direct && len(m.outbox) < m.depth:
			require.Equal(m.t, Outbox, g, "give %d: to the outbox", task)
			m.outbox = append(m.outbox, task)
		default:
			require.Equal(m.t, Full, g, "give %d: nowhere", task)
			return
		}
		m.given[task] = true
	case 2: // a busy worker finishes its task
		busy := m.busy()
		if len(busy) == 0 {
			return
		}
		s := busy[arg%len(busy)]
		m.running--
		if s.task%2 == 0 {
			m.ends = append(m.ends, s.task)
		}
		want, ok, parks := m.expectNext(s)
		s.finish <- struct{}{}
		m.settle(s)
		switch {
		case parks:
			require.True(m.t, s.parked, "it parks: nothing for it")
		case ok:
			require.Equal(m.t, want, s.task, "it takes the outbox's first task")
		default:
			require.True(m.t, s.gone, "it exits")
		}
	case 3: // take back from the first task whose number is arg%4 modulo 4 on
		if len(m.outbox) == 0 {
			return
		}
		sel := func(t int) bool { return t%4 == arg%4 }
		got := m.h.TakeBack(sel, nil)
		i := slices.IndexFunc(m.outbox, sel)
		var want []int
		if i >= 0 {
			want = slices.Clone(m.outbox[i:])
			m.outbox = m.outbox[:i]
		}
		require.Equal(m.t, want, got, "TakeBack")
		for _, t := range got {
			m.back[t] = true
		}
	case 4: // remove the tasks whose number is arg%3 modulo 3
		sel := func(t int) bool { return t%3 == arg%3 }
		got := m.h.Remove(sel, nil)
		var want []int
		m.outbox = slices.DeleteFunc(m.outbox, func(t int) bool {
			if sel(t) {
				want = append(want, t)
			}
			return sel(t)
		})
		require.Equal(m.t, want, got, "Remove")
		for _, t := range got {
			m.back[t] = true
		}
	case 5: // set the maximum
		m.max = 1 + arg%5
		start := m.h.SetMax(m.max)
		var quit []*sim
		for m.workers > m.max && len(m.parked) > 0 {
			quit = append(quit, m.quitFront())
		}
		want := min(len(m.outbox), max(m.max-m.workers, 0))
		require.Equal(m.t, want, start, "SetMax: workers to start for the outbox")
		m.workers += start
		for _, s := range quit {
			m.settle(s)
			require.True(m.t, s.gone, "a parked worker above the maximum exits")
		}
		for range start {
			want, ok, parks := m.expectNext(nil)
			require.True(m.t, ok && !parks, "a worker started for the outbox takes its task")
			m.startSim(-1)
			require.Equal(m.t, want, m.sims[len(m.sims)-1].task)
		}
	case 6: // the reaping clock ticks, arg*100 ms after the last
		time.Sleep(time.Duration(arg) * 100 * time.Millisecond)
		now := time.Now()
		more := m.h.Reap(now)
		m.tick++
		m.ticked[m.tick%4] = now
		var quit []*sim
		for m.workers > m.min && len(m.parked) > 0 && m.idle(m.parked[0], now) {
			quit = append(quit, m.quitFront())
		}
		require.Equal(m.t, m.workers > m.min, more, "Reap: the clock goes on while there are more than the minimum")
		for _, s := range quit {
			m.settle(s)
			require.True(m.t, s.gone, "a worker idle for the timeout exits")
		}
	case 7: // the loop takes the ends
		got := m.h.Ends(nil)
		require.Equal(m.t, m.ends, append([]int(nil), got...), "Ends: in the order reported")
		m.ends = nil
	}
	m.check()
}

// idle is the model's reaping rule: the worker parked before tick
// since+1, which came at least a timeout before now.
func (m *model) idle(s *sim, now time.Time) bool {
	t := s.since + 1
	if t > m.tick {
		return false
	}
	if m.tick-t >= 4 {
		t = m.tick - 3
	}
	return !m.ticked[t%4].Add(m.timeout).After(now)
}

func (m *model) check() {
	require.Equal(m.t, len(m.outbox), m.h.Len(), "the outbox's length")
	n, _ := m.h.Workers()
	require.Equal(m.t, m.workers, n, "workers")
	require.Equal(m.t, m.running, m.h.Running(), "running")
	m.h.mu.Lock()
	parked, outboxed := m.h.parked.Len(), m.h.outbox.Len()
	m.h.mu.Unlock()
	require.Equal(m.t, len(m.parked), parked, "parked")
	require.False(m.t, outboxed > 0 && parked > 0, "the invariant: the outbox holds tasks only while no worker is parked")
	live := 0
	for _, s := range m.sims {
		if !s.gone {
			live++
		}
	}
	require.Equal(m.t, m.workers, live, "every worker counted is a goroutine, and no other")
	for task, n := range m.started {
		require.Equal(m.t, 1, n, "task %d started once", task)
		require.False(m.t, m.back[task], "task %d was taken back and started", task)
	}
}

// finishAll ends every task, closes the hand-off, and checks that every
// task given started exactly once or was taken back.
func (m *model) finishAll() {
	m.h.Close()
	m.closed = true
	for len(m.parked) > 0 {
		m.settle(m.quitFront())
	}
	for {
		busy := m.busy()
		if len(busy) == 0 {
			break
		}
		m.step(2)
	}
	require.Empty(m.t, m.outbox, "the workers emptied the outbox before they exited")
	for task := range m.given {
		require.True(m.t, m.started[task] == 1 != m.back[task], "task %d: started once, or taken back", task)
	}
	require.Zero(m.t, m.workers)
}

// FuzzHandoff drives the hand-off with operations decoded from the input,
// with real worker goroutines in a synctest bubble, and checks it against
// a model after every step: where each task goes, what each worker gets
// from Next, what TakeBack and Remove return, which workers SetMax and the
// reaping clock stop and start, the ends in the order reported, the
// invariant, and that every task given starts exactly once or is taken
// back.
func FuzzHandoff(f *testing.F) {
	f.Add([]byte{0x0b, 0, 0, 0, 0, 2, 2, 0, 3, 4, 7})
	f.Add([]byte{0x01, 0, 0, 0, 1, 1, 0x15, 2, 2, 2, 0x2d, 0x05, 2, 2})
	f.Add([]byte{0x12, 0, 0, 2, 2, 0x56, 0x56, 0x56, 0, 0x0e, 0x56})
	f.Add([]byte{0x23, 0, 0, 0, 0, 0, 0, 0x0b, 0x13, 0x1c, 2, 2, 7, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		synctest.Test(t, func(t *testing.T) {
			depth, max := 1+int(data[0]&3), 1+int(data[0]>>2&3)
			m := newModel(t, depth, max, int(data[0]>>4&1))
			for _, b := range data[1:] {
				m.step(b)
			}
			m.finishAll()
		})
	})
}

func TestAParkedWorkerGetsTheNextTaskAndNoneWaitsInTheOutboxMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(t, 4, 2, 0)
		m.step(0) // a new worker
		m.step(2) // it finishes and parks
		require.Len(t, m.parked, 1)
		m.step(0) // to the parked worker, not the outbox
		assert.Empty(t, m.outbox)
		m.finishAll()
	})
}

func TestTheLoopHearsOfWhatItListensFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(t, 2, 1, 0)
		m.step(0) // task 0 to a new worker
		require.False(t, m.h.Listen(WantEnds|WantIdle, 0, 0), "nothing ended yet")
		m.step(2) // task 0 ends, reported (even), and the worker parks
		select {
		case <-m.wake:
		default:
			t.Fatal("the end woke the loop")
		}
		assert.True(t, m.h.Listen(WantEnds, 0, 0), "an end waits to be taken: no need to wait")
		m.h.Ends(nil)
		m.ends = nil
		assert.True(t, m.h.Listen(WantPark, 0, 0), "a worker is parked")
		m.finishAll()
	})
}

// Once a hold has passed, a worker parks though the outbox holds tasks
// (the invariant's one exception). A task given then must not go to it: it
// would start before the tasks held in the outbox, given earlier, which
// the loop is about to drop. It goes behind them.
func TestATaskGivenAfterAHoldPassedDoesNotStartBeforeTheTasksHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wake := make(chan struct{}, 1)
		h := New[int](4, 1, 0, -1, wake)
		hold := make(chan struct{})
		h.Hold(hold)
		require.Equal(t, Start, h.Give(1, false))
		require.Equal(t, Outbox, h.Give(2, false))
		close(hold) // a Shutdown's deadline passes
		var seat Seat[int]
		got := make(chan int, 1)
		go func() {
			end := 1
			t, ok := h.Next(&seat, true, &end, false)
			if ok {
				got <- t
			}
			close(got)
		}()
		synctest.Wait()
		require.Equal(t, 1, h.Parked(), "the worker takes nothing from a held outbox: it parks")
		assert.Equal(t, Outbox, h.Give(3, false), "task 3 goes behind task 2, held")
		assert.Equal(t, Full, h.Give(4, true), "a direct task waits")
		assert.Equal(t, []int{2, 3}, h.TakeBack(nil, nil), "the outbox holds 2 then 3, in order")
		h.Close()
		synctest.Wait()
		_, ok := <-got
		assert.False(t, ok, "the worker got no task: it exits")
	})
}
