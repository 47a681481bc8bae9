package workerpool

import (
	"sync/atomic"

	"github.com/gammazero/deque"
)

// Claims: how the dispatcher and a worker agree on who owns a hand-off.
//
// Every task sent on Pool.work carries a claim: a word that holds the
// send's number while the hand-off is pending. The worker that receives it
// claims it with one compare-and-swap (number to claimed) before it starts
// it; the dispatcher takes it back by revoking it (number to revoked).
// Exactly one of the two wins:
//   - a worker whose claim fails drops the task and tells nobody: the
//     dispatcher revoked it, and holds it again;
//   - the dispatcher revokes newest first, and stops at the first hand-off
//     a worker has claimed: Pool.work is first in, first out, so every
//     earlier hand-off has reached a worker, which will claim it. So what
//     it takes back of a queue is always the queue's latest hand-offs, and
//     the started tasks of every queue are a prefix of those it accepted.
//
// A claim is reused once its hand-off is resolved (claimed or revoked). A
// worker that receives a revoked hand-off late compares the word with the
// hand-off's own send number, which no later send reuses, so its claim
// fails even if the word holds another hand-off's number by then.

// A claim is the word on which the dispatcher and a worker agree who owns a
// pending hand-off: a send number while pending, then claimed or revoked.
// Each claim has a cache line of its own: the dispatcher and a worker
// write it for every task, and neighbours would slow each other down.
type claim struct {
	word atomic.Uint64
	_    [cacheLine - 8]byte
}

// The words of a resolved claim. Send numbers start at 1 and never reach
// revoked.
const (
	claimed = 0
	revoked = ^uint64(0)
)

// claim claims the hand-off numbered sent for the calling worker, and
// reports whether it did: false if the dispatcher revoked it first. A nil
// claim is a first task's, already the worker's.
func (c *claim) claim(sent uint64) bool {
	return c == nil || c.word.CompareAndSwap(sent, claimed)
}

// handOffs is the dispatcher's record of what it sent on Pool.work and has
// not seen resolved: plain data, owned by the dispatcher.
type handOffs struct {
	// out lists the hand-offs sent and not yet known to be resolved, in
	// send order. A resolved one leaves when it reaches the front, or
	// when the list is compacted. A hand-off that reached a worker as it
	// was sent (a parked one) can no longer be revoked: out keeps only its
	// claim, to reuse, not its task, so that a finished task's closure is
	// not kept alive.
	out deque.Deque[handOff]
	// free holds the claims of resolved hand-offs, to reuse; spare is the
	// claim prepared for the next send, holding its number.
	free  []*claim
	spare *claim
	// sent is the number of the last send. reached is the number of the
	// latest hand-off known to have reached a worker: every send up to it
	// has, and none of them can be revoked.
	sent, reached uint64
	// buffered counts the hand-offs in out that hold their tasks: those
	// sent to the buffer. lane is the lane of all of them, if they are of
	// one lane; nil if of several.
	buffered int
	lane     *lane
	// compactAt is the length of out at which a send that finds no free
	// claim compacts it first.
	compactAt int
}

// next returns h, a task to send, with a claim that holds the number of
// the next send. Until commit, the send has not happened: the same claim
// and number serve the next call.
func (o *handOffs) next(h handOff) handOff {
	if o.spare == nil {
		o.spare = o.newClaim()
		o.spare.word.Store(o.sent + 1)
	}
	h.claim, h.sent = o.spare, o.sent+1
	return h
}

// commit records h, which next returned, as sent; received says that a
// worker has received it already.
func (o *handOffs) commit(h handOff, received bool) {
	o.sent++
	o.spare = nil
	if received {
		o.reached = o.sent
		o.out.PushBack(handOff{claim: h.claim, sent: h.sent})
		return
	}
	if o.buffered == 0 || o.lane != h.lane {
		o.lane = h.lane
		if o.buffered > 0 {
			o.lane = nil
		}
	}
	o.buffered++
	o.out.PushBack(h)
}

// allOf reports whether every hand-off sent to the buffer and not yet
// known to be resolved is of lane l.
func (o *handOffs) allOf(l *lane) bool { return o.buffered == 0 || o.lane == l }

// newClaim returns a claim no pending hand-off holds.
func (o *handOffs) newClaim() *claim {
	if len(o.free) == 0 {
		o.sweep()
	}
	if len(o.free) == 0 && o.out.Len() >= o.compactAt {
		// The front hand-off is pending, while later ones were resolved:
		// its worker was descheduled between its receive and its claim.
		// Free the claims of the others rather than make more.
		o.compact()
	}
	if n := len(o.free); n > 0 {
		c := o.free[n-1]
		o.free = o.free[:n-1]
		return c
	}
	return new(claim)
}

// maxFreeClaims is the most free claims kept for reuse: enough for a full
// buffer and a claim in the hands of each of many workers.
const maxFreeClaims = 4 * handOffBuffer

// sweep lets the resolved hand-offs at the front of out go.
func (o *handOffs) sweep() {
	for o.out.Len() > 0 {
		h := o.out.Front()
		if h.claim.word.Load() == h.sent {
			return // pending
		}
		o.out.PopFront()
		o.release(h)
	}
}

// release lets h, a resolved hand-off taken out of out, go, and keeps its
// claim for reuse.
func (o *handOffs) release(h handOff) {
	if h.lane != nil {
		o.buffered--
	}
	if len(o.free) < maxFreeClaims {
		o.free = append(o.free, h.claim)
	}
}

// compact lets every resolved hand-off of out go, and records in reached
// the latest one that was claimed.
func (o *handOffs) compact() {
	n := o.out.Len()
	for range n {
		h := o.out.PopFront()
		switch h.claim.word.Load() {
		case h.sent:
			o.out.PushBack(h) // pending
		case claimed:
			o.reached = max(o.reached, h.sent)
			o.release(h)
		default:
			o.release(h)
		}
	}
	o.compactAt = 2*o.out.Len() + 2*handOffBuffer
}

// pending returns how many hand-offs may still be pending: at least those
// in the buffer. It is exact unless a hand-off was claimed out of turn.
func (o *handOffs) pending() int {
	o.sweep()
	return o.out.Len()
}

// holdsTasks reports whether out holds hand-offs sent to the buffer with
// their tasks: they may still be pending, or claimed and not yet let go.
func (o *handOffs) holdsTasks() bool {
	o.sweep()
	return o.buffered > 0
}

// settled reports whether every hand-off sent is resolved.
func (o *handOffs) settled() bool {
	if o.pending() == 0 {
		return true
	}
	for h := range o.out.Iter() {
		if h.claim.word.Load() == h.sent {
			return false
		}
	}
	return true
}

// revoke takes back, newest first, the pending hand-offs whose lanes which
// selects (nil: all), until it meets one that a worker has claimed or that
// has reached a worker: that one and every earlier one have reached
// workers and will start. It appends the hand-offs it took back to back,
// in send order, and returns it.
func (o *handOffs) revoke(which func(*lane) bool, back []handOff) []handOff {
	n := len(back)
	for i := o.out.Len() - 1; i >= 0; i-- {
		h := o.out.At(i)
		if h.sent <= o.reached {
			break
		}
		if which != nil && !which(h.lane) {
			continue
		}
		if !h.claim.word.CompareAndSwap(h.sent, revoked) {
			if h.claim.word.Load() == claimed {
				o.reached = max(o.reached, h.sent)
				break
			}
			continue // revoked already
		}
		back = append(back, h)
	}
	// Newest first: reverse what this call added into send order.
	for i, j := n, len(back)-1; i < j; i, j = i+1, j-1 {
		back[i], back[j] = back[j], back[i]
	}
	return back
}

// revokeOne takes back the pending hand-off of the task numbered seq in
// lane l, and returns it, if no worker has claimed it: its submitter gave
// up on it. One task that leaves does not change the order of the others,
// so it may be taken back even if a worker has received it.
func (o *handOffs) revokeOne(l *lane, seq uint64) (handOff, bool) {
	for i := o.out.Len() - 1; i >= 0; i-- {
		h := o.out.At(i)
		if h.lane == l && h.seq == seq {
			return h, h.claim.word.CompareAndSwap(h.sent, revoked)
		}
	}
	return handOff{}, false
}
