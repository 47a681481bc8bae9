package natsjs

import (
	"sort"
	"time"
)

// The pulls and probes a flow has out: what the server still owes, and
// the slots that wait for its confirmation.

// A pullRecord is a live pull.
type pullRecord struct {
	id       uint64
	n        int
	maxBytes int       // 0: no limit
	deadline time.Time // past it, the server serves the pull no more
	ended    bool      // the server ended it with a status
}

// A probeRecord is a probe on its way: the slots it frees when the server
// answers.
type probeRecord struct {
	n        int
	deadline time.Time
}

// addPull records a pull of n owed slots, of at most maxBytes (0: no
// limit), which meets the credits. Call with mu held.
func (f *flow) addPull(n, maxBytes int, deadline time.Time) pull {
	f.lastPull++
	f.owed += n
	f.liveSum += n
	f.addPullBytes(f.lastPull, maxBytes)
	f.credits = max(f.credits-n, 0)
	f.pulls = append(f.pulls, pullRecord{id: f.lastPull, n: n, maxBytes: maxBytes, deadline: deadline})
	return pull{id: f.lastPull, n: n, maxBytes: maxBytes}
}

// addProbe records a probe freeing n slots. Call with mu held.
func (f *flow) addProbe(n int, deadline time.Time) uint64 {
	f.lastProbe++
	f.probing += n
	f.probes[f.lastProbe] = probeRecord{n: n, deadline: deadline}
	return f.lastProbe
}

// find returns the index of live pull id in f.pulls, or -1.
func (f *flow) find(id uint64) int {
	i := sort.Search(len(f.pulls), func(i int) bool { return f.pulls[i].id >= id })
	if i < len(f.pulls) && f.pulls[i].id == id {
		return i
	}
	return -1
}

// ended records that the server ended pull id with pending messages not
// delivered (-1: all of them), and frees those slots, and its max_bytes.
// A status for a pull already ended or given up on changes nothing.
func (f *flow) ended(id uint64, pending int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endedLocked(id, pending)
}

// endedLocked is ended. Call with mu held.
func (f *flow) endedLocked(id uint64, pending int) {
	i := f.find(id)
	if i < 0 || f.pulls[i].ended {
		return
	}
	p := &f.pulls[i]
	p.ended = true
	f.liveSum -= p.n
	if pending < 0 || pending > p.n {
		pending = p.n
	}
	f.owed -= min(pending, f.owed)
	f.endPullBytes(p)
	f.signal()
}

// sweep forgets the pulls that ended or expired before now and, if more
// is owed than the live pulls can still deliver, takes the difference
// back: to a probe with deadline if probe, else to the free slots. It
// returns the slots taken back and the probe's id (0 if none).
func (f *flow) sweep(now time.Time, probe bool, deadline time.Time) (lost int, probeID uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := 0
	for k < len(f.pulls) && (f.pulls[k].ended || now.After(f.pulls[k].deadline)) {
		if !f.pulls[k].ended {
			f.liveSum -= f.pulls[k].n
			f.endPullBytes(&f.pulls[k])
		}
		k++
	}
	if k > 0 {
		f.pulls = append(f.pulls[:0], f.pulls[k:]...)
	}
	if f.owed <= f.liveSum {
		return 0, 0
	}
	lost = f.owed - f.liveSum
	f.owed = f.liveSum
	if probe {
		probeID = f.addProbe(lost, deadline)
	}
	f.signal()
	return lost, probeID
}

// abandonPulls gives up on every live pull, as when the connection is
// closed: nothing more can come.
func (f *flow) abandonPulls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulls = f.pulls[:0]
	f.liveSum = 0
	f.owed = 0
	f.owedBytes, f.oversize = 0, 0
	f.signal()
}

// endProbe frees the slots of probe id, which the server answered or which
// failed; false if it had ended already.
func (f *flow) endProbe(id uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.probes[id]
	if !ok {
		return false
	}
	delete(f.probes, id)
	f.probing -= p.n
	f.signal()
	return true
}

// expireProbes frees the slots of the probes whose deadline passed before
// now (all of them if all), and returns how many acks they covered.
func (f *flow) expireProbes(now time.Time, all bool) (expired int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, p := range f.probes {
		if all || now.After(p.deadline) {
			delete(f.probes, id)
			f.probing -= p.n
			expired += p.n
		}
	}
	if expired > 0 {
		f.signal()
	}
	return expired
}
