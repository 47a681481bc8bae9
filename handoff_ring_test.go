package workerpool

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// The claim ring of handoff.go, alone: a dispatcher that sends the tasks of
// three lanes on a buffered channel, each in a slot of the ring, and takes
// hand-offs back at random while workers receive and claim them.

// ringModel is the dispatcher's side: the lanes' waiting tasks and the
// record of the hand-offs, as the loop keeps them.
type ringModel struct {
	lanes   [3]*lane
	waiting [3][]entry // in acceptance order
	out     handOffs
	work    chan handOff
}

func newRingModel(perLane, ring int) *ringModel {
	m := &ringModel{work: make(chan handOff, 8)}
	m.out.init(ring)
	for i := range m.lanes {
		m.lanes[i] = &lane{owner: i}
		for seq := range perLane {
			// accepted carries the seq to the worker that claims it, which
			// gets the slot's task, not the dispatcher's record.
			m.waiting[i] = append(m.waiting[i], entry{lane: m.lanes[i], seq: uint64(seq + 1), accepted: int64(seq + 1)})
		}
	}
	return m
}

// send hands out the first waiting task of lane i, if the buffer has room.
func (m *ringModel) send(i int) {
	if len(m.waiting[i]) == 0 {
		return
	}
	h := m.out.prepare(m.waiting[i][0], 0)
	select {
	case m.work <- h:
	default:
		m.out.unprepare() // full
		return
	}
	m.waiting[i] = m.waiting[i][1:]
	m.out.commit()
}

// recall revokes the hand-offs from the first of the lanes which selects
// (nil: all), and every later one, and puts their tasks back in front of
// their lanes, in order.
func (m *ringModel) recall(which func(*lane) bool) {
	from := uint64(0)
	if which != nil {
		from = m.out.first(func(s *send) bool { return which(s.lane) })
		if from == 0 {
			return
		}
	}
	back, _ := m.out.revoke(func(s *send) bool { return s.n >= from }, nil, nil)
	for _, e := range slices.Backward(back) {
		i := e.lane.owner.(int)
		m.waiting[i] = slices.Insert(m.waiting[i], 0, e)
	}
}

// TestEveryHandOffIsClaimedOrRevokedAndEachLaneStartsAPrefix runs the
// model with one, two and four workers, which claim what they receive
// (some after a yield, as a worker descheduled between its receive and its
// claim, which holds its slot pending, so that the ring must skip it or
// grow), while the dispatcher sends, takes back a lane's hand-offs and every
// later one, or all of them, and finally stops, revoking everything
// pending. Then, in every lane, the tasks that workers claimed are exactly
// the first ones it accepted, each claimed once, and the rest are those
// the dispatcher holds: nothing is claimed twice, lost, or started out of
// turn. With one worker, each lane's tasks start in acceptance order.
func TestEveryHandOffIsClaimedOrRevokedAndEachLaneStartsAPrefix(t *testing.T) {
	const rounds = 300
	for _, workers := range []int{1, 2, 4} {
		for _, ring := range []int{1, 64} { // a ring of 2 slots grows as workers hold them
			t.Run(fmt.Sprint("workers=", workers, "/ring=", 2*ring), func(t *testing.T) {
				for round := range rounds {
					testRingRound(t, workers, ring, round)
				}
			})
		}
	}
}

func testRingRound(t *testing.T, workers, ring, round int) {
	rng := rand.New(rand.NewPCG(uint64(round), uint64(workers*ring)))
	const perLane = 40
	m := newRingModel(perLane, ring)
	var mu sync.Mutex
	var started [3][]uint64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for h := range m.work {
				if (h.n+uint64(w))%5 == 0 {
					runtime.Gosched() // between the receive and the claim
				}
				e, ok := h.slot.claim(h.n)
				if !ok {
					continue
				}
				mu.Lock()
				started[e.lane.owner.(int)] = append(started[e.lane.owner.(int)], uint64(e.accepted))
				mu.Unlock()
			}
		})
	}
	for range 200 {
		switch r := rng.IntN(10); {
		case r < 7:
			m.send(rng.IntN(3))
		case r < 9:
			l := m.lanes[rng.IntN(3)]
			m.recall(func(x *lane) bool { return x == l })
		default:
			m.recall(nil)
		}
		if rng.IntN(4) == 0 {
			runtime.Gosched()
		}
	}
	// Stop: what is pending comes back; the rest was claimed or will be by
	// the worker that received it.
	m.recall(nil)
	close(m.work)
	wg.Wait()
	for i := range m.lanes {
		got := started[i]
		if workers == 1 && !slices.IsSorted(got) {
			t.Fatalf("round %d, lane %d: one worker started %v, not in acceptance order", round, i, got)
		}
		slices.Sort(got)
		for k, seq := range got {
			if seq != uint64(k+1) {
				t.Fatalf("round %d, lane %d: started %v, not a prefix of its tasks each once", round, i, got)
			}
		}
		var rest []uint64
		for _, e := range m.waiting[i] {
			rest = append(rest, e.seq)
		}
		for k, seq := range rest {
			if seq != uint64(len(got)+k+1) {
				t.Fatalf("round %d, lane %d: started %v, and the dispatcher holds %v", round, i, got, rest)
			}
		}
		if len(got)+len(rest) != perLane {
			t.Fatalf("round %d, lane %d: %d started and %d held of %d", round, i, len(got), len(rest), perLane)
		}
	}
}

// A worker that receives a revoked hand-off after its slot was reused for a
// later send cannot claim that later send: it compares the slot's word
// with its own hand-off's number.
func TestARevokedHandOffCannotClaimTheSendThatReusedItsSlot(t *testing.T) {
	var o handOffs
	o.init(1)
	l := &lane{}
	old := o.prepare(entry{lane: l, seq: 1}, 0)
	o.commit()
	if back, _ := o.revoke(nil, nil, nil); len(back) != 1 {
		t.Fatalf("revoked %d hand-offs, want 1", len(back))
	}
	var reused handOff
	for seq := uint64(2); reused.slot != old.slot; seq++ {
		if seq > 100 {
			t.Fatal("the revoked hand-off's slot is never reused")
		}
		reused = o.prepare(entry{lane: l, seq: seq}, 0)
		o.commit()
	}
	if _, ok := old.slot.claim(old.n); ok {
		t.Fatal("the revoked hand-off was claimed")
	}
	if _, ok := reused.slot.claim(reused.n); !ok {
		t.Fatal("the later send was not claimed by its own worker")
	}
}

// A hand-off that its worker has not claimed yet holds its slot: sends go
// on in the others, skipping it, and the ring grows only when every slot
// is held. It is not taken back once a later one is claimed: it has reached
// a worker, whose claim succeeds.
func TestAHeldSlotIsSkippedAndTheRingGrowsOnlyWhenAllAreHeld(t *testing.T) {
	var o handOffs
	o.init(2) // 4 slots
	l := &lane{}
	held := o.prepare(entry{lane: l, seq: 1}, 0)
	o.commit()
	for seq := uint64(2); seq < 5000; seq++ {
		h := o.prepare(entry{lane: l, seq: seq}, 0)
		o.commit()
		if h.slot == held.slot {
			t.Fatalf("send %d reused the held slot", seq)
		}
		if _, ok := h.slot.claim(h.n); !ok {
			t.Fatalf("hand-off %d: its claim failed", h.n)
		}
	}
	if n := len(o.slots); n != 4 {
		t.Errorf("the ring grew to %d slots with one held", n)
	}
	if back, _ := o.revoke(nil, nil, nil); len(back) != 0 {
		t.Errorf("revoked %d hand-offs sent before one that was claimed", len(back))
	}
	if _, ok := held.slot.claim(held.n); !ok {
		t.Error("the held hand-off's claim failed")
	}
	var all []handOff // now hold them all: the ring doubles, the held ones keep their records
	for seq := uint64(5000); seq < 5010; seq++ {
		all = append(all, o.prepare(entry{lane: l, seq: seq}, 0))
		o.commit()
	}
	if n := len(o.slots); n != 16 {
		t.Errorf("with 10 held, the ring has %d slots, want 16", n)
	}
	if n := o.pending(); n != 10 {
		t.Errorf("%d pending, want 10", n)
	}
	for _, h := range all {
		if _, r, ok := o.at(h.n); !ok || r.n != h.n {
			t.Fatalf("hand-off %d lost its record as the ring grew", h.n)
		}
		if _, ok := h.slot.claim(h.n); !ok {
			t.Fatalf("hand-off %d: its claim failed", h.n)
		}
	}
}

// A call that gives up revokes its one hand-off, wherever it is among
// those pending, and no other; once a worker has claimed it, it cannot.
func TestRevokeOneTakesBackOnlyThatHandOff(t *testing.T) {
	var o handOffs
	o.init(4)
	l := &lane{}
	var hs []handOff
	for seq := uint64(1); seq <= 3; seq++ {
		hs = append(hs, o.prepare(entry{lane: l, seq: seq}, 0))
		o.commit()
	}
	if e, _, ok := o.revokeOne(l, 2); !ok || e.seq != 2 {
		t.Fatalf("revokeOne(2) = %d, %v", e.seq, ok)
	}
	if _, ok := hs[1].slot.claim(hs[1].n); ok {
		t.Error("the revoked hand-off was claimed")
	}
	for _, i := range []int{0, 2} {
		if _, ok := hs[i].slot.claim(hs[i].n); !ok {
			t.Errorf("hand-off %d: its claim failed", i+1)
		}
	}
	if _, _, ok := o.revokeOne(l, 3); ok {
		t.Error("revoked a claimed hand-off")
	}
}
