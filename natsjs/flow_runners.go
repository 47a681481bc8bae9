package natsjs

import "time"

// The runners' side of the flow: which runners to send to the pool, which
// message each takes, and when it gives its worker back.

// A runner is one task of the run on the pool, while it holds a worker.
type runner struct {
	cur       *message      // the message it runs, or nil; guarded by flow.mu
	lingering bool          // it waits in flow.idle; guarded by flow.mu
	wake      chan *message // buffer 1: a message handed to it as it lingers, or nil at a stop
	timer     *time.Timer   // its linger's, made on its first linger
}

func newRunner() *runner { return &runner{wake: make(chan *message, 1)} }

// runnersDue returns how many runners to submit now, and counts them
// pending: one for each queued message no runner will take soon, within
// the pool's size; or, while nothing is queued or owed and no credit is
// left, tickets for the workers no runner holds. Call with mu held.
func (f *flow) runnersDue() int {
	if f.stopping || f.keyed {
		return 0
	}
	var want int
	switch {
	case f.queued() > 0:
		want = min(f.size, f.running+f.queued())
	case f.owed == 0 && f.credits == 0:
		want = f.size
	}
	n := max(want-f.active-f.pending, 0)
	f.pending += n
	return n
}

// dueRunners is runnersDue, for the watcher and the puller.
func (f *flow) dueRunners() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runnersDue()
}

// unsubmitted takes back n runners counted pending that the pool refused.
func (f *flow) unsubmitted(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending -= n
}

// start records that runner rn started on a worker. It returns false if
// the run is stopping: rn must give the worker back at once.
func (f *flow) start(rn *runner) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending--
	if f.stopping {
		return false
	}
	f.active++
	f.runners[rn] = struct{}{}
	f.signalIfDueLocked()
	return true
}

// next returns the next queued message for rn to run, and counts it
// running. It returns nil, and rn gives its worker back, if the run is
// stopping, or yield says that rn has had its turn and another runner was
// submitted in its place, or nothing is queued and nothing arrived within
// the horizon; a runner that gives its worker back because nothing is
// queued leaves a credit: a worker is free. While messages arrive, a
// runner that finds the queue empty lingers instead (linger is true): it
// keeps its worker for the horizon, for a message the subscription hands
// it directly (see delivered), rather than give the worker back and cost
// a hand-off to the pool per message; if nothing is owed, it leaves a
// credit too, so that the puller asks for its message.
func (f *flow) next(rn *runner, yield bool, now int64) (m *message, linger bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rn.cur = nil
	empty := f.queued() == 0
	if !f.stopping && !yield && empty && now-f.lastArrival < f.horizon.Load() {
		if f.owed == 0 {
			f.credits = min(f.credits+1, f.size)
			f.signal()
		}
		rn.lingering = true
		f.idle = append(f.idle, rn)
		return nil, true
	}
	if f.stopping || empty || yield {
		f.leaveLocked(rn)
		if !f.stopping && empty {
			f.credits = min(f.credits+1, f.size)
		}
		f.signal()
		return nil, false
	}
	m = f.queue[f.head]
	f.queue[f.head] = nil
	f.head++
	if f.head == len(f.queue) {
		f.queue, f.head = f.queue[:0], 0
	} else if f.head >= 1024 && f.head*2 >= len(f.queue) {
		f.queue, f.head = append(f.queue[:0], f.queue[f.head:]...), 0
	}
	f.running++
	rn.cur = m
	f.signalIfDueLocked()
	return m, false
}

// signalIfDueLocked wakes the puller if a plain pull is due: a runner took
// a message and may run it long, with no ack to carry the pull. Call with
// mu held.
func (f *flow) signalIfDueLocked() {
	if n, _ := f.want(0, 0); n > 0 {
		f.signal()
	}
}

// leaveLocked records that rn gives its worker back. Call with mu held.
func (f *flow) leaveLocked(rn *runner) {
	f.active--
	delete(f.runners, rn)
}

// unlinger ends the linger of rn, whose horizon passed: it gives its
// worker back, and unlinger returns true. It returns false if a message
// was handed to rn meanwhile, which rn must take from rn.wake.
func (f *flow) unlinger(rn *runner) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !rn.lingering {
		return false
	}
	f.dropIdleLocked(rn)
	f.leaveLocked(rn)
	f.signal()
	return true
}

// dropIdleLocked takes rn off the lingering runners. Call with mu held.
func (f *flow) dropIdleLocked(rn *runner) {
	rn.lingering = false
	for i, x := range f.idle {
		if x == rn {
			f.idle = append(f.idle[:i], f.idle[i+1:]...)
			return
		}
	}
}

// yieldDue reports whether a runner that has had its turn should give its
// worker back to another runner: only if messages wait, and the run is not
// stopping. It counts the other runner pending.
func (f *flow) yieldDue() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping || f.queued() == 0 {
		return false
	}
	f.pending++
	return true
}

// died records that runner rn ended, its message settled, because its
// handler panicked or called runtime.Goexit. It returns how many runners
// to submit in its place.
func (f *flow) died(rn *runner) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	rn.cur = nil
	f.active--
	delete(f.runners, rn)
	f.signal()
	return f.runnersDue()
}

// held appends every message the run holds to buf: queued, running,
// finishing, or being given back.
func (f *flow) held(buf []*message) []*message {
	f.mu.Lock()
	defer f.mu.Unlock()
	buf = append(buf, f.queue[f.head:]...)
	for rn := range f.runners {
		if rn.cur != nil {
			buf = append(buf, rn.cur)
		}
	}
	for m := range f.finishing {
		buf = append(buf, m)
	}
	for m := range f.givingBack {
		buf = append(buf, m)
	}
	for m := range f.out {
		buf = append(buf, m)
	}
	return buf
}

// stop forbids pulls and new starts from now on, and sends the lingering
// runners away.
func (f *flow) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopping = true
	for _, rn := range f.idle {
		rn.lingering = false
		f.leaveLocked(rn)
		rn.wake <- nil
	}
	f.idle = nil
	f.signal()
}

// monotonic returns the time on a monotonic clock, in nanoseconds.
func monotonic() int64 { return int64(time.Since(epoch)) }

// epoch is monotonic's origin.
var epoch = time.Now()

// handBack takes the queue, for the stop to hand back: from now on, a
// message that arrives goes back at once.
func (f *flow) handBack() []*message {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handingBack = true
	q := append([]*message(nil), f.queue[f.head:]...)
	q = f.takeWaiting(q)
	for _, m := range q {
		f.bytes -= m.size
	}
	clear(f.queue)
	f.queue, f.head = f.queue[:0], 0
	return q
}
