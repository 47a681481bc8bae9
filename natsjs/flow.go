package natsjs

import (
	"sync"
	"sync/atomic"
	"time"
)

// A flow is a run's account of the messages the server may count as
// delivered to this process and not acked, and of the runners it has in
// the pool; it decides when to pull, how much, and when to send a runner.
// It does no I/O: the run sends what it decides. One mutex guards it all.
//
// Each message is, at every moment, in one of six places, whose sum,
// used, never exceeds bound:
//   - owed: a pull asked for it, and the server may still deliver it;
//   - queued: delivered, waiting for a runner;
//   - running: a runner took it and has not settled it;
//   - finishing: its handler returned, and its dead letter is being
//     published without the worker, which the flow counts free;
//   - acked: acked with a plain ack that no pull carried since and no
//     probe covers: the server may not have processed the ack yet;
//   - probing: acked, and a probe (an ack with a reply) asks the server to
//     confirm that it processed that ack and every one before it.
//
// A slot an ack frees goes into a pull only if that pull travels as an
// ack sent after it (+NXT): the server processes the acks of one
// connection to one consumer in the order they were sent, and registers a
// pull that an ack carries only once it processed that ack. A plain pull
// takes a queue of its own in the server, so it only takes slots no
// unconfirmed ack holds. So what the server counts as delivered to this
// process and not acked never exceeds bound.
//
// How much to ask for is decided by time, not by a count: the runners
// should have waiting, or on their way, what they will run during the
// horizon (a few pull round trips), perRunner messages each, and a message
// for each worker a runner found free with nothing to run (a credit). A
// runner holds a worker of the pool; one that finds nothing to run gives
// the worker back at once. While no message waits or is owed and no credit
// is left, the flow asks for tickets: runners that prove, by starting,
// that the pool has a worker free. So a pool busy with other work gets no
// message from Run that it could not start.
type flow struct {
	mu sync.Mutex

	queue   []*message // queued, oldest first from head
	head    int
	running int
	// finishing holds the messages whose handler returned and that are
	// still held: those whose dead letter is being published (see
	// final.go). They count against the bounds, not as running.
	finishing map[*message]struct{}
	// givingBack holds the messages handed back in goroutines of their
	// own (see run.giveBackAsync), until their settling went out: they get
	// their progress, but count against no bound, as the stop took them
	// off the queue, or no slot took them.
	givingBack map[*message]struct{}
	// With key order (flow_keys.go), messages go to the pool as keyed
	// tasks, not to runners: out holds those submitted, true once their
	// task started; waiting counts those not started. arrivals numbers
	// the messages in the order they came.
	keyed    bool
	out      map[*message]bool
	waiting  int
	arrivals uint64
	keys     map[string]int // the messages in out, by key
	owed     int
	acked    int
	probing  int

	// credits counts workers that runners found free, with nothing to
	// run, since the last pull.
	credits int
	// active counts runners that hold a worker; pending, those submitted
	// to the pool and not started yet.
	active, pending int
	runners         map[*runner]struct{} // the active ones
	idle            []*runner            // the active ones that linger, waiting for a message
	// lastArrival is when the last message arrived, in nanoseconds of
	// the monotonic clock (see monotonic): runners linger only while
	// messages arrive.
	lastArrival int64

	// stopping is set when the run stops: no pull starts, no runner takes
	// a message. handingBack is set once the stop handed back the queue:
	// a message that arrives later goes back at once.
	stopping, handingBack bool

	// The run's parameters, set by setParams.
	size     int // the pool's size or the sub-pool's limit
	bound    int // the most messages held: WithMaxInFlight, or size + maxAhead
	maxBatch int // the most messages one pull asks for

	// minAhead is the least perRunner says, for tests that need
	// messages queued whatever the handlers' speed.
	minAhead int

	// horizon is how far ahead the runners should be fed, a duration
	// (atomic: runners read it for their turns); service is the average
	// time a runner takes per message, in nanoseconds (atomic: runners
	// update it as they go, without a lock).
	horizon, service atomic.Int64

	// The byte bound (flow_bytes.go): what the queued and running
	// messages weigh (bytes), what the live pulls may still bring
	// (owedBytes, the sum of their max_bytes), the bound (maxBytes, 0:
	// none), the consumer's MaxRequestMaxBytes (0: none), what was left of
	// the last pull the server ended because the next message was larger
	// (tooBig), the live pull of one message whatever its size (oversize,
	// 0: none), and the size a pull plans for each message, that of the
	// recent ones (recentSize, see sized).
	bytes, owedBytes          int
	maxBytes, maxRequestBytes int
	tooBig                    int
	oversize                  uint64
	recentSize                int

	pulls     []pullRecord // live pulls, oldest first
	liveSum   int          // the sum of n over pulls
	lastPull  uint64
	probes    map[uint64]probeRecord
	lastProbe uint64

	// changed (buffer 1) is signalled whenever a plain pull may be due
	// (a credit, slots freed by a status, a Nak or a probe), and, once the
	// run is stopping, whenever what is owed, active or probing falls: the
	// puller and then the stop wait on it. Not on every delivery or ack:
	// while runners run, their acks carry the pulls, and waking the puller
	// for each message would cost a goroutine switch per message.
	changed chan struct{}
}

// maxAhead bounds what runners have waiting or owed, however fast they
// run: jetstream's own Messages iterator buffers 500 messages by default.
const maxAhead = 500

func newFlow() *flow {
	return &flow{
		runners:    make(map[*runner]struct{}),
		finishing:  make(map[*message]struct{}),
		givingBack: make(map[*message]struct{}),
		probes:     make(map[uint64]probeRecord),
		changed:    make(chan struct{}, 1),
		size:       1,
		bound:      1,
		maxBatch:   1,
	}
}

// setParams sets the run's parameters: the pool's size, the bound
// (WithMaxInFlight, 0: none but size + maxAhead), the horizon and the
// largest pull.
func (f *flow) setParams(size, maxInFlight int, horizon time.Duration, maxBatch int) {
	f.horizon.Store(int64(horizon))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.size = max(size, 1)
	f.credits = min(f.credits, f.size) // a pool that shrank has fewer workers free
	f.bound = maxInFlight
	if f.bound <= 0 {
		f.bound = f.size + maxAhead
	}
	f.maxBatch = max(maxBatch, 1)
	f.signal()
}

// horizonNow returns the horizon: how long a runner's turn lasts.
func (f *flow) horizonNow() time.Duration { return time.Duration(f.horizon.Load()) }

// sample records that a runner took d to run and settle a message. The
// average moves by an eighth of the difference; concurrent samples may
// overwrite each other, which an average of many does not notice.
func (f *flow) sample(d time.Duration) {
	old := f.service.Load()
	if old == 0 {
		f.service.Store(max(int64(d), 1))
		return
	}
	f.service.Store(max(old+(int64(d)-old)/8, 1))
}

// perRunner returns how many messages each runner should have ahead of
// it: those it runs within the horizon; none until it has run one. A
// runner whose messages each take longer than the horizon has none ahead:
// when it finishes one, it waits a round trip for the next, which is
// little beside its message, rather than hold one the pool may not start.
func (f *flow) perRunner() int {
	n := int64(0)
	if svc := f.service.Load(); svc > 0 {
		n = min(f.horizon.Load()/svc, maxAhead)
	}
	return max(int(n), f.minAhead)
}

// signal tells the waiters to look again. Call with mu held.
func (f *flow) signal() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *flow) queued() int { return len(f.queue) - f.head }

func (f *flow) used() int {
	return f.owed + f.queued() + f.waiting + f.running + len(f.finishing) + f.acked + f.probing
}

// target returns how many messages the runners should have waiting or
// owed: with key order, the pool's workers. Call with mu held.
func (f *flow) target() int {
	if f.keyed {
		return min(maxAhead, f.perRunner()*f.size)
	}
	return min(maxAhead, f.perRunner()*f.active)
}

// A pull is what a pull asks for: n messages, of at most maxBytes bytes
// in all (0: no limit), under its id.
type pull struct {
	id       uint64
	n        int
	maxBytes int
}

// want returns how many messages a pull should ask for now, reusing up to
// reusable acked slots and freed bytes of the message whose ack would
// carry it, and how many bytes they may weigh: 0 while enough is waiting
// or owed, or while no slot is free. Enough is the target, or a message
// for each credit, as long as the pool has a worker for it beside the
// running handlers, whichever is more. While some is waiting or owed and
// no credit calls, it waits until half the target is missing, so that
// pulls are fewer and larger. Call with mu held.
func (f *flow) want(reusable, freed int) (n, maxBytes int) {
	if f.stopping {
		return 0, 0
	}
	supply := f.queued() + f.waiting + f.owed
	target := f.target()
	free := min(f.credits, max(f.size-f.running, 0))
	if f.keyed {
		// No runner proves a worker free: those ours do not run are.
		// A message that waits for its key waits for no worker.
		free = max(f.size-f.running, 0)
		supply -= f.behindKeys()
	}
	n = max(target, free) - supply
	// A test's minAhead asks for that many, whatever the pulls' size.
	if n <= 0 || supply > 0 && free == 0 && n < (target+1)/2 && f.minAhead == 0 {
		return 0, 0
	}
	n = min(n, f.maxBatch, f.bound-f.used()+reusable)
	if n <= 0 {
		return 0, 0
	}
	return f.fitBytes(n, freed)
}

// takeForPull decides a plain pull; its n is 0 if none is due. probe says
// that one is due but acked slots, which a plain pull may not take, are in
// the way: the caller should probe them.
func (f *flow) takeForPull(deadline time.Time) (p pull, probe bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, maxBytes := f.want(0, 0)
	if n == 0 {
		n, _ = f.want(f.acked, 0)
		return pull{}, f.acked > 0 && n > 0
	}
	return f.addPull(n, maxBytes, deadline), false
}

// probeAcked covers every acked slot with a probe, whose id it returns; 0
// if none is acked.
func (f *flow) probeAcked(deadline time.Time) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.acked == 0 {
		return 0
	}
	n := f.acked
	f.acked = 0
	return f.addProbe(n, deadline)
}

// delivered takes in a message that arrived, in a slot a pull owed or, for
// a message no live pull owed (one given up on delivered late), a free one.
// It returns false if m must go back at once: no slot is free, or the stop
// has handed back the queue. Else m waits for a runner, and runners is how
// many the caller must submit to the pool.
//
// A redelivery (again) of a message the run has in charge, whose progress
// messages did not reach the server within AckWait, is no message of its
// own: the one in charge adopts it (see message.adopt), and it takes no
// slot and no byte; the slot a pull owed it is free. The server counts the
// message once, as delivered and not acked: what it counts as delivered
// to this process and not acked still never exceeds bound.
func (f *flow) delivered(m *message, again bool) (taken bool, runners int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	owed := f.owed > 0 && f.owesBytes(m.size)
	if owed {
		f.owed--
		f.deliveredBytes(m.size)
		if f.owed == 0 && f.stopping {
			f.signal() // the stop waits for this
		}
	}
	if again && m.seq != 0 {
		if h := f.inCharge(m.seq); h != nil && h.adopt(m.msg) {
			f.signal() // the slot is free
			return true, 0
		}
	}
	if !owed && (f.used() >= f.bound || f.overBytes(m.size)) || f.handingBack {
		return false, 0
	}
	f.bytes += m.size
	f.arrivals++
	m.n = f.arrivals
	if f.keyed {
		f.queue = append(f.queue, m)
		f.signal() // the puller submits it
		return true, 0
	}
	f.lastArrival = monotonic()
	if n := len(f.idle); n > 0 {
		// A runner lingers for a message: it is this one.
		rn := f.idle[n-1]
		f.idle = f.idle[:n-1]
		rn.lingering = false
		rn.cur = m
		f.running++
		rn.wake <- m
		return true, 0
	}
	f.queue = append(f.queue, m)
	return true, f.runnersDue()
}

// inCharge returns the message the run holds, queued, running, finishing
// or being given back, whose stream sequence is seq; nil if none. It looks through
// every held message, which costs nothing on a first delivery: only a
// redelivery calls it. Call with mu held.
func (f *flow) inCharge(seq uint64) *message {
	for rn := range f.runners {
		if rn.cur != nil && rn.cur.seq == seq {
			return rn.cur
		}
	}
	for m := range f.finishing {
		if m.seq == seq {
			return m
		}
	}
	for m := range f.givingBack {
		if m.seq == seq {
			return m
		}
	}
	for m := range f.out {
		if m.seq == seq {
			return m
		}
	}
	for _, m := range f.queue[f.head:] {
		if m.seq == seq {
			return m
		}
	}
	return nil
}

// A flowCounts is a snapshot of a flow.
type flowCounts struct {
	queued, waiting, running, owed, acked int
	finishing, probing                    int
	credits, active, pending              int
	bytes, owedBytes                      int
}

// counts returns a snapshot.
func (f *flow) counts() flowCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return flowCounts{
		queued: f.queued(), waiting: f.waiting, running: f.running, owed: f.owed, acked: f.acked,
		finishing: len(f.finishing), probing: f.probing,
		credits: f.credits, active: f.active, pending: f.pending,
		bytes: f.bytes, owedBytes: f.owedBytes,
	}
}
