package workerpool

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// The claim protocol of handoff.go, alone: a dispatcher that sends the
// tasks of three lanes on a buffered channel, each with a claim, and takes
// lanes' hand-offs back at random while workers receive and claim them.

// claimModel is the dispatcher's side: the lanes' waiting tasks and the
// record of the hand-offs, as the loop keeps them.
type claimModel struct {
	lanes   [3]*lane
	waiting [3][]entry // in acceptance order
	out     handOffs
	work    chan handOff
	back    []handOff
}

func newClaimModel(perLane int) *claimModel {
	m := &claimModel{work: make(chan handOff, 8)}
	for i := range m.lanes {
		m.lanes[i] = &lane{id: i}
		for seq := range perLane {
			m.waiting[i] = append(m.waiting[i], entry{lane: m.lanes[i], seq: uint64(seq + 1)})
		}
	}
	return m
}

// send hands out the first waiting task of lane i, if the buffer has room.
func (m *claimModel) send(i int) {
	if len(m.waiting[i]) == 0 {
		return
	}
	h := m.out.next(handOff{kind: runTask, entry: m.waiting[i][0]})
	select {
	case m.work <- h:
	default:
		return // full: the same claim and number serve the next send
	}
	m.waiting[i] = m.waiting[i][1:]
	m.out.commit(h)
}

// recall revokes the hand-offs of the lanes which selects and puts their
// tasks back in front of their lanes, in order.
func (m *claimModel) recall(which func(*lane) bool) {
	m.back = m.out.revoke(which, m.back[:0])
	for _, h := range slices.Backward(m.back) {
		i := h.lane.id
		m.waiting[i] = slices.Insert(m.waiting[i], 0, h.entry)
	}
}

// TestEveryHandOffIsClaimedOrRevokedAndEachLaneStartsAPrefix runs the
// model with one, two and four workers, which claim what they receive
// (some after a yield, as a worker descheduled between its receive and its
// claim), while the dispatcher sends, takes back one lane's hand-offs or
// all of them, and finally stops, revoking everything pending. Then, in
// every lane, the tasks that workers claimed are exactly the first ones it
// accepted, each claimed once, and the rest are those the dispatcher holds:
// nothing is claimed twice, lost, or started out of turn. With one worker,
// each lane's tasks start in acceptance order.
func TestEveryHandOffIsClaimedOrRevokedAndEachLaneStartsAPrefix(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 30
	}
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			for round := range rounds {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(workers)))
				const perLane = 40
				m := newClaimModel(perLane)
				var mu sync.Mutex
				var started [3][]uint64
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						for h := range m.work {
							if (h.sent+uint64(w))%5 == 0 {
								runtime.Gosched() // between the receive and the claim
							}
							if _, ok := h.claim.claim(h.sent); !ok {
								continue
							}
							mu.Lock()
							started[h.lane.id] = append(started[h.lane.id], h.seq)
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
				// Stop: what is pending comes back; the rest was claimed or
				// will be by the worker that received it.
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
		})
	}
}

// A hand-off at the front of the record that its worker has not claimed
// yet, while every later one is claimed, does not make the dispatcher
// allocate a claim per send: the others' claims are reused. It is not
// revoked: a later hand-off was claimed, so it has reached a worker, and
// its worker's claim succeeds.
func TestAClaimHeldUpAtTheFrontLetsTheOthersBeReused(t *testing.T) {
	var o handOffs
	l := &lane{}
	first := o.next(handOff{kind: runTask, entry: entry{lane: l, seq: 1}})
	o.commit(first)
	claims := map[*claim]bool{first.claim: true}
	for seq := uint64(2); seq < 5000; seq++ {
		h := o.next(handOff{kind: runTask, entry: entry{lane: l, seq: seq}})
		o.commit(h)
		if _, ok := h.claim.claim(h.sent); !ok {
			t.Fatalf("hand-off %d: its claim failed", h.sent)
		}
		claims[h.claim] = true
	}
	if n := len(claims); n > 4*handOffBuffer {
		t.Errorf("%d claims made for 5000 sends with one held up", n)
	}
	if back := o.revoke(nil, nil); len(back) != 0 {
		t.Errorf("revoked %d hand-offs sent before one that was claimed", len(back))
	}
	if _, ok := first.claim.claim(first.sent); !ok {
		t.Error("the held-up hand-off's claim failed")
	}
}

// A worker that receives a revoked hand-off after its claim was reused for
// a later send cannot claim that later send: it compares the claim with its
// own hand-off's number.
func TestARevokedHandOffCannotClaimTheSendThatReusedItsClaim(t *testing.T) {
	var o handOffs
	l := &lane{}
	old := o.next(handOff{kind: runTask, entry: entry{lane: l, seq: 1}})
	o.commit(old)
	if back := o.revoke(nil, nil); len(back) != 1 {
		t.Fatalf("revoked %d hand-offs, want 1", len(back))
	}
	var reused handOff
	for seq := uint64(2); reused.claim != old.claim; seq++ {
		if seq > 1000 {
			t.Fatal("the revoked hand-off's claim is never reused")
		}
		reused = o.next(handOff{kind: runTask, entry: entry{lane: l, seq: seq}})
		o.commit(reused)
	}
	if _, ok := old.claim.claim(old.sent); ok {
		t.Fatal("the revoked hand-off was claimed")
	}
	if _, ok := reused.claim.claim(reused.sent); !ok {
		t.Fatal("the later send was not claimed by its own worker")
	}
}

// A call that gives up revokes its one hand-off, wherever it is in the
// record, and no other; once a worker has claimed it, it cannot.
func TestRevokeOneTakesBackOnlyThatHandOff(t *testing.T) {
	var o handOffs
	l := &lane{}
	var hs []handOff
	for seq := uint64(1); seq <= 3; seq++ {
		h := o.next(handOff{kind: runTask, entry: entry{lane: l, seq: seq}})
		o.commit(h)
		hs = append(hs, h)
	}
	if h, ok := o.revokeOne(l, 2); !ok || h.seq != 2 {
		t.Fatalf("revokeOne(2) = %d, %v", h.seq, ok)
	}
	if _, ok := hs[1].claim.claim(hs[1].sent); ok {
		t.Error("the revoked hand-off was claimed")
	}
	for _, i := range []int{0, 2} {
		if _, ok := hs[i].claim.claim(hs[i].sent); !ok {
			t.Errorf("hand-off %d: its claim failed", hs[i].seq)
		}
	}
	if _, ok := o.revokeOne(l, 3); ok {
		t.Error("revoked a claimed hand-off")
	}
}
