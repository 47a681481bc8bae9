package natsjs

import "time"

// The settling side of the flow: what a handled message frees when a
// runner (or a keyed task) acks it, Naks it or terminates it, and the
// messages held after their handler returned, whose dead letter is being
// published.

// carry decides whether the ack of m, a message a runner handled,
// carries a pull, and takes the slots if it does: the message's own and
// those of the plain acks sent before, then free ones. It returns the
// pull; its n is 0, and nothing changed, if the ack should go plain.
func (f *flow) carry(m *message, deadline time.Time) pull {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The message moves from running to acked: its ack travels with the
	// pull, and is processed before it.
	n, maxBytes := f.want(f.acked+1, m.size)
	if n == 0 {
		return pull{}
	}
	f.runningDone(m)
	f.acked++
	f.acked -= min(f.acked, n)
	return f.addPull(n, maxBytes, deadline)
}

// ackedPlain records that a runner sent a plain ack of m, the message it
// ran. Call only after the ack was published: a later carried pull may
// take its slot. It does not wake the puller, unless the bytes it frees
// let a pull go: the runners' next acks carry the pulls while they run,
// and the watcher probes the acked slots.
func (f *flow) ackedPlain(m *message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runningDone(m)
	f.acked++
	if f.maxBytes > 0 {
		f.signalIfDueLocked()
	}
}

// released frees the slot of m, a message that a runner settled without
// an ack of the run's own (a Nak, a Term, or the handler's own settling),
// or never settled.
func (f *flow) released(m *message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runningDone(m)
	f.signal()
}

// runningDone records that m, running, is no longer held. Call with mu
// held.
func (f *flow) runningDone(m *message) {
	f.running--
	f.bytes -= m.size
	if f.keyed {
		f.forget(m)
	}
}

// requeue puts m, running, whose handler the stop cut, back in the queue,
// which the stop hands back once the pulls have ended; no runner takes it
// any more. It returns false, and changes nothing, if the stop has handed
// the queue back already: m must go back now.
func (f *flow) requeue(m *message) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.handingBack {
		return false
	}
	f.running--
	if f.keyed {
		f.forget(m)
	}
	f.queue = append(f.queue, m)
	return true
}

// hold records that m, running, stays held once its runner has gone on,
// until unhold: it gets its progress, and counts against the bound and
// the byte bound, but no longer as running, so that the flow counts its
// worker free and pulls for it. A key's task that finished frees its key
// too.
func (f *flow) hold(m *message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running--
	if f.keyed {
		f.forget(m)
	}
	f.finishing[m] = struct{}{}
	f.signal()
}

// givingBackStart records that m, which the run gives back in a goroutine
// of its own, is held until givingBackDone: it gets its progress.
func (f *flow) givingBackStart(m *message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.givingBack[m] = struct{}{}
}

// givingBackDone records that m was given back.
func (f *flow) givingBackDone(m *message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.givingBack, m)
}

// unhold frees the slot of m, held, which was settled (or left).
func (f *flow) unhold(m *message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.finishing, m)
	f.bytes -= m.size
	f.signal()
}
