package natsjs

import (
	"sort"
	"sync"
	"time"
)

// A slotBook keeps the in-flight bound. Each of its slots is, at every
// moment, in exactly one of four places, so that free + owed + held +
// probing is the bound:
//   - free: any pull may ask for a message in it;
//   - owed: a pull asked for a message in it, and the server may still
//     deliver one;
//   - held: a message taken and not yet settled is in it;
//   - probing: an ack freed it, the server has not confirmed that it
//     processed that ack, and a probe (an ack with a reply) asks it to.
//
// A slot an ack frees goes straight into a pull only if that pull travels
// as the ack itself (+NXT, see ack.go): the server then processes the ack
// before it registers the pull. Any other pull takes free slots only, so
// that the server never serves a pull in a slot whose ack it may not have
// processed: what the server counts as delivered to this process and not
// acked never exceeds the bound.
//
// The server does not say which pull a message was for. What it owes is
// counted as a whole: asked for, less delivered, less the pending counts
// the server gives when a pull ends (408, 409). A pull that has neither
// ended nor expired is live; once none is, nothing more is owed, whatever
// the count says, and the difference (messages or statuses lost with a
// connection) is freed through a probe.
//
// slotBook does no I/O: the run sends what it decides.
type slotBook struct {
	mu                        sync.Mutex
	free, owed, held, probing int
	// stopped is set when the run stops: no pull may start after it.
	stopped   bool
	pulls     []pullRecord // live pulls, oldest first
	liveSum   int          // the sum of n over pulls
	lastPull  uint64
	probes    map[uint64]probeRecord
	lastProbe uint64
	// changed (buffer 1) is signalled whenever slots become free or the
	// owed count falls: the puller and a stop wait on it.
	changed chan struct{}
}

// A pullRecord is a live pull.
type pullRecord struct {
	id       uint64
	n        int
	deadline time.Time // past it, the server serves the pull no more; zero: never given up on
	ended    bool      // the server ended it with a status
}

// A probeRecord is a probe on its way: the slots it frees when the server
// answers, and the messages whose acks it confirms, for an error.
type probeRecord struct {
	n        int
	deadline time.Time
	msgs     []*message
}

func newSlotBook(bound int) *slotBook {
	return &slotBook{free: bound, probes: make(map[uint64]probeRecord), changed: make(chan struct{}, 1)}
}

// signal tells the waiters to look again. Call with mu held.
func (b *slotBook) signal() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// addPull records a pull of n owed slots. Call with mu held.
func (b *slotBook) addPull(n int, deadline time.Time) uint64 {
	b.lastPull++
	b.owed += n
	b.liveSum += n
	b.pulls = append(b.pulls, pullRecord{id: b.lastPull, n: n, deadline: deadline})
	return b.lastPull
}

// addProbe records a probe freeing n slots. Call with mu held.
func (b *slotBook) addProbe(n int, deadline time.Time, msgs []*message) uint64 {
	b.lastProbe++
	b.probing += n
	b.probes[b.lastProbe] = probeRecord{n: n, deadline: deadline, msgs: msgs}
	return b.lastProbe
}

// takeForPull takes free slots for a plain pull, at most maxN, if at least
// minN are free, and records the pull. It returns the pull's id and size,
// 0 if it took none.
func (b *slotBook) takeForPull(maxN, minN int, deadline time.Time) (id uint64, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || b.free < max(minN, 1) {
		return 0, 0
	}
	n = min(b.free, maxN)
	b.free -= n
	return b.addPull(n, deadline), n
}

// stop forbids pulls from now on.
func (b *slotBook) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
}

// carry settles acked held messages whose acks go out now, the last of
// them carrying a pull: the pull takes their slots and the free ones, at
// most maxN. Acked slots that do not fit go to a probe (probeID 0 if
// none). It returns the pull's id and size; 0 and nothing changed if the
// run stopped, and the acks must go to a probe.
func (b *slotBook) carry(acked, maxN int, pullDeadline, probeDeadline time.Time, msgs []*message) (pullID uint64, n int, probeID uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return 0, 0, 0
	}
	b.held -= acked
	n = min(acked+b.free, maxN)
	fromAcked := min(acked, n)
	b.free -= n - fromAcked
	pullID = b.addPull(n, pullDeadline)
	if left := acked - fromAcked; left > 0 {
		probeID = b.addProbe(left, probeDeadline, msgs)
	}
	return pullID, n, probeID
}

// probeAcked settles acked held messages whose acks go out now, the last
// of them with a reply: their slots wait for the server's answer.
func (b *slotBook) probeAcked(acked int, deadline time.Time, msgs []*message) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= acked
	return b.addProbe(acked, deadline, msgs)
}

// releaseHeld frees the slots of n held messages that were settled without
// an ack of the run's own, or handed back.
func (b *slotBook) releaseHeld(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	b.free += n
	b.signal()
}

// delivered moves a slot to a message that just arrived: an owed one, or,
// for a message nobody owed (a pull given up on delivered late), a free
// one. It reports false if there is none: the message must go back.
func (b *slotBook) delivered() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.owed > 0:
		b.owed--
	case b.free > 0:
		b.free--
	default:
		return false
	}
	b.held++
	if b.owed == 0 {
		b.signal()
	}
	return true
}

// find returns the index of live pull id in b.pulls, or -1.
func (b *slotBook) find(id uint64) int {
	i := sort.Search(len(b.pulls), func(i int) bool { return b.pulls[i].id >= id })
	if i < len(b.pulls) && b.pulls[i].id == id {
		return i
	}
	return -1
}

// ended records that the server ended pull id with pending messages not
// delivered (-1: all of them), and frees those slots. A status for a pull
// already ended or given up on changes nothing.
func (b *slotBook) ended(id uint64, pending int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.find(id)
	if i < 0 || b.pulls[i].ended {
		return
	}
	p := &b.pulls[i]
	p.ended = true
	b.liveSum -= p.n
	if pending < 0 || pending > p.n {
		pending = p.n
	}
	pending = min(pending, b.owed)
	b.owed -= pending
	b.free += pending
	b.signal()
}

// sweep forgets the pulls that ended or expired before now and, if more
// is owed than the live pulls can still deliver, takes the difference
// back: to a probe with deadline if probe, else to the free slots. It
// returns the slots taken back and the probe's id (0 if none).
func (b *slotBook) sweep(now time.Time, probe bool, deadline time.Time) (lost int, probeID uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := 0
	for k < len(b.pulls) && (b.pulls[k].ended || !b.pulls[k].deadline.IsZero() && now.After(b.pulls[k].deadline)) {
		if !b.pulls[k].ended {
			b.liveSum -= b.pulls[k].n
		}
		k++
	}
	if k > 0 {
		b.pulls = append(b.pulls[:0], b.pulls[k:]...)
	}
	if b.owed <= b.liveSum {
		return 0, 0
	}
	lost = b.owed - b.liveSum
	b.owed = b.liveSum
	if probe {
		probeID = b.addProbe(lost, deadline, nil)
	} else {
		b.free += lost
	}
	b.signal()
	return lost, probeID
}

// abandonPulls gives up on every live pull, as when the connection is
// closed: nothing more can come.
func (b *slotBook) abandonPulls() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pulls = b.pulls[:0]
	b.liveSum = 0
	b.free += b.owed
	b.owed = 0
	b.signal()
}

// endProbe frees the slots of probe id, which the server answered or which
// failed, and returns it; false if it had ended already.
func (b *slotBook) endProbe(id uint64) (probeRecord, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.probes[id]
	if !ok {
		return p, false
	}
	delete(b.probes, id)
	b.probing -= p.n
	b.free += p.n
	b.signal()
	return p, true
}

// expireProbes frees the slots of the probes whose deadline passed before
// now (all of them if all), and returns those probes.
func (b *slotBook) expireProbes(now time.Time, all bool) []probeRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []probeRecord
	for id, p := range b.probes {
		if all || now.After(p.deadline) {
			delete(b.probes, id)
			b.probing -= p.n
			b.free += p.n
			out = append(out, p)
		}
	}
	if len(out) > 0 {
		b.signal()
	}
	return out
}

// counts returns where the slots are.
func (b *slotBook) counts() (free, owed, held, probing int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.free, b.owed, b.held, b.probing
}
