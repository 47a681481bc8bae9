package workerpool

import (
	"sync/atomic"

	"github.com/gammazero/deque"
)

// Claims: how the dispatcher and a worker agree on who owns a hand-off.
//
// A task that the dispatcher sends to the hand-off buffer travels with a
// claim, which holds the task and a word. The word holds the send's number
// while the hand-off is pending. The worker that receives it claims it with
// one compare-and-swap before it starts it, and takes the task from it;
// the dispatcher takes it back by revoking it, with another. Exactly one
// of the two wins:
//   - a worker whose claim fails drops the hand-off and tells nobody: the
//     dispatcher revoked it, and holds the task again;
//   - the dispatcher revokes newest first, and stops at the first hand-off
//     a worker has claimed: Pool.work is first in, first out, so every
//     earlier hand-off has reached a worker, which will claim it. So what
//     it takes back of a queue is always the queue's latest hand-offs, and
//     the started tasks of every queue are a prefix of those it accepted.
//
// The task waits in the claim, not in the message, and the worker that
// claims it takes it out: a revoked hand-off left in the buffer, or the
// record of one claimed, holds no task's closure.
//
// A claim is reused once its hand-off is resolved (claimed or revoked). A
// worker that receives a revoked hand-off late compares the word with the
// hand-off's own send number, which no later send reuses, so its claim
// fails even if the word holds another hand-off's number by then.

// A claim is what a hand-off to the buffer carries: its task, and the word
// on which the dispatcher and a worker agree who owns it. A claim has a
// cache line of its own: the dispatcher and a worker write it for every
// such task, and neighbours would slow each other down.
type claim struct {
	word atomic.Uint64
	// task is the hand-off's task while it is pending: written by the
	// dispatcher before the send, taken out by the worker that claims it,
	// or by the dispatcher once it has revoked it.
	task task
	_    [cacheLine - 32]byte
}

// The words of a claim that is not pending. Send numbers start at 1 and
// never reach them.
const (
	claimed = 0              // a worker claimed it and took its task
	taking  = ^uint64(0) - 1 // a worker is claiming it: it has won, and takes its task
	revoked = ^uint64(0)     // the dispatcher took it back
)

// claim claims the hand-off numbered sent for the calling worker, and
// returns its task; false if the dispatcher revoked it first. The claim is
// let go, for reuse, only once the worker has taken its task out.
func (c *claim) claim(sent uint64) (task, bool) {
	if !c.word.CompareAndSwap(sent, taking) {
		return task{}, false
	}
	t := c.task
	c.task = task{}
	c.word.Store(claimed)
	return t, true
}

// resolved reports whether the hand-off numbered sent, of claim c, is
// claimed or revoked, and c free for reuse.
func (c *claim) resolved(sent uint64) bool {
	w := c.word.Load()
	return w != sent && w != taking
}

// handOffs is the dispatcher's record of what it sent on Pool.work and has
// not seen resolved: plain data, owned by the dispatcher.
type handOffs struct {
	// out lists the hand-offs sent with a claim and not yet known to be
	// resolved, in send order. A resolved one leaves when it reaches the
	// front, or when the list is compacted.
	out deque.Deque[handOff]
	// free holds the claims of resolved hand-offs, to reuse; spare is the
	// claim prepared for the next send, holding its number.
	free  []*claim
	spare *claim
	// sent is the number of the last send with a claim. reached is the
	// number of the latest one known to have reached a worker: every send
	// up to it has, and none of them can be revoked.
	sent, reached uint64
	// lane is the lane of the last hand-off sent, and run the number of the
	// first of the sends of that lane in a row that ends with it: every
	// hand-off in out is of lane if the first one in out is of the run.
	lane *lane
	run  uint64
	// revokedIn counts the revoked hand-offs still in out.
	revokedIn int
	// compactAt is the length of out at which a send that finds no free
	// claim compacts it first.
	compactAt int
}

// init sizes out for a full buffer and the hand-offs resolved behind a
// pending one until a compaction, so that it does not shrink and grow
// again each time the buffer drains and fills.
func (o *handOffs) init() { o.out.SetBaseCap(4 * handOffBuffer) }

// next returns h, a task to send, as it goes: with a claim that holds the
// task and the number of the next send. Until commit, the send has not
// happened: the same claim and number serve the next call.
func (o *handOffs) next(h handOff) handOff {
	if o.spare == nil {
		o.spare = o.newClaim()
		o.spare.word.Store(o.sent + 1)
	}
	o.spare.task = h.task
	h.task = task{}
	h.claim, h.sent = o.spare, o.sent+1
	return h
}

// unsent lets go of the task that next put in the spare claim, when the
// send did not happen.
func (o *handOffs) unsent() {
	if o.spare != nil {
		o.spare.task = task{}
	}
}

// commit records h, which next returned, as sent.
func (o *handOffs) commit(h handOff) {
	o.sent++
	o.spare = nil
	if o.lane != h.lane {
		o.lane, o.run = h.lane, h.sent
	}
	o.out.PushBack(h)
}

// allOf reports whether every hand-off that may be pending is of lane l.
func (o *handOffs) allOf(l *lane) bool {
	if o.out.Len() == 0 || o.lane == l && o.out.Front().sent >= o.run {
		return true
	}
	o.sweep() // the others may be resolved
	return o.out.Len() == 0 || o.lane == l && o.out.Front().sent >= o.run
}

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
		if !h.claim.resolved(h.sent) {
			return // pending
		}
		o.out.PopFront()
		o.release(h.claim)
	}
}

// release keeps c, the claim of a resolved hand-off taken out of out, for
// reuse.
func (o *handOffs) release(c *claim) {
	if c.word.Load() == revoked {
		o.revokedIn--
	}
	if len(o.free) < maxFreeClaims {
		o.free = append(o.free, c)
	}
}

// compact lets every resolved hand-off of out go, and records in reached
// the latest one that was claimed.
func (o *handOffs) compact() {
	n := o.out.Len()
	for range n {
		h := o.out.PopFront()
		if !h.claim.resolved(h.sent) {
			o.out.PushBack(h) // pending
			continue
		}
		if h.claim.word.Load() == claimed {
			o.reached = max(o.reached, h.sent)
		}
		o.release(h.claim)
	}
	o.compactAt = 2*o.out.Len() + 2*handOffBuffer
}

// pending returns how many hand-offs may still be pending: at least those
// in the buffer. It is exact unless a hand-off was claimed out of turn.
func (o *handOffs) pending() int {
	o.sweep()
	return o.out.Len() - o.revokedIn
}

// inBuffer reports whether a hand-off that no worker has received may be
// pending: if not, whatever the buffer holds is revoked.
func (o *handOffs) inBuffer() bool {
	for i := o.out.Len() - 1; i >= 0; i-- {
		h := o.out.At(i)
		if h.sent <= o.reached {
			return false
		}
		if h.claim.word.Load() == h.sent {
			return true
		}
	}
	return false
}

// settled reports whether every hand-off sent is resolved.
func (o *handOffs) settled() bool {
	o.sweep()
	for h := range o.out.Iter() {
		if !h.claim.resolved(h.sent) {
			return false
		}
	}
	return true
}

// revoke takes back, newest first, the pending hand-offs whose lanes which
// selects (nil: all), until it meets one that a worker has claimed or that
// has reached a worker: that one and every earlier one have reached
// workers and will start. It appends the hand-offs it took back to back,
// in send order, each with its task, and returns it.
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
			if h.claim.word.Load() != revoked {
				o.reached = max(o.reached, h.sent) // claimed
				break
			}
			continue // revoked already
		}
		o.revokedIn++
		back = append(back, o.takeTask(h))
	}
	// Newest first: reverse what this call added into send order.
	for i, j := n, len(back)-1; i < j; i, j = i+1, j-1 {
		back[i], back[j] = back[j], back[i]
	}
	return back
}

// takeTask returns h, which the dispatcher has revoked, with its task,
// taken out of its claim.
func (o *handOffs) takeTask(h handOff) handOff {
	h.task, h.claim.task = h.claim.task, task{}
	return h
}

// revokeOne takes back the pending hand-off of the task numbered seq in
// lane l, and returns it with its task, if no worker has claimed it: its
// submitter gave up on it. One task that leaves does not change the order
// of the others, so it may be taken back even if a worker has received it.
func (o *handOffs) revokeOne(l *lane, seq uint64) (handOff, bool) {
	for i := o.out.Len() - 1; i >= 0; i-- {
		h := o.out.At(i)
		if h.lane == l && h.seq == seq {
			if !h.claim.word.CompareAndSwap(h.sent, revoked) {
				return handOff{}, false
			}
			o.revokedIn++
			return o.takeTask(h), true
		}
	}
	return handOff{}, false
}
