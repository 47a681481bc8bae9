package workerpool

import (
	"sync/atomic"

	"github.com/gammazero/deque"
)

// A lane is one of the pool's queues of waiting tasks: the pool's own, or a
// sub-pool's. Its tasks are handed out in the order the pool accepted them,
// except that a keyed task waits in its key's line (see keyLine) while
// another task with its key is out, and goes when its key is free and its
// turn comes. The dispatcher owns every field but the atomic counters,
// which the lane's submitters and workers add to.
type lane struct {
	sub *Subpool // nil for the pool's own lane

	// tasks holds the unkeyed waiting tasks, in acceptance order; a
	// waiter's task is nil, with the waiter at the back of waiters.
	tasks   deque.Deque[func()]
	waiters deque.Deque[waiter]
	// keys holds the lines of the keys with a task waiting or out; ready,
	// those whose next task may start, in the order they became ready.
	// Within the lane, its unkeyed tasks and its ready keys take turns:
	// keyTurn says a ready key goes next.
	keys    map[string]*keyLine
	ready   deque.Deque[*keyLine]
	keyTurn bool
	peak    int // the most keys held at once since keys was made; see forget

	waiting   int    // tasks waiting in tasks and in the keys' lines
	submitted uint64 // tasks accepted; published as stats.submitted
	inRing    bool   // in dispatcher.ring: it has waiting tasks
	// For a sub-pool: limit is the most of its tasks out at once, running
	// counts those out (sent to a worker and not seen to end), and
	// endedSeen is stats.ended as the dispatcher last counted it.
	limit, running int
	endedSeen      uint64
	busyListed     bool       // in dispatcher.busy: it has tasks out
	stops          []*request // Subpool Stop and StopWait requests waiting for the lane to be idle

	stats laneStats
}

// laneStats are a sub-pool's counters, for its Status. The dispatcher
// publishes the first group with Store; the others are added to by
// submitters (CallerRuns, rejections), workers and the dispatcher.
type laneStats struct {
	state       atomic.Int32
	limit       atomic.Int64
	submitted   atomic.Uint64 // tasks the dispatcher accepted
	peakWaiting atomic.Int64

	_ [cacheLine]byte

	started, ended  atomic.Uint64 // tasks workers received and ended
	abandoned       atomic.Uint64 // dropped by a stop: from the lane, or from the hand-off buffer (recall)
	panicked        atomic.Uint64
	rejected        atomic.Uint64
	callerSubmitted atomic.Uint64 // tasks CallerRuns ran in a submitter
	callerRan       atomic.Uint64
}

// maxFreeLines is how many unused key lines the dispatcher keeps, so that
// keys that come and go cost no allocation.
const maxFreeLines = 256

// smallKeyMap is the most keys whose map a lane keeps however few it holds,
// so that keys that come and go do not remake it.
const smallKeyMap = 64

// A keyLine is the line of one key's tasks in one lane: they never run at
// once and start in submission order. A key has a line only while one of
// its tasks waits or is out, so an idle key costs nothing.
type keyLine struct {
	key   string
	lane  *lane
	tasks deque.Deque[func()] // waiting, in submission order
	out   bool                // one of its tasks is sent to a worker and not seen to end
	// next links the lines whose task ended, for the dispatcher to see
	// (Pool.ended); a line is on it at most once, as one task is out.
	next *keyLine
}

// startable reports whether the lane has a task that may start now, the
// pool not being paused: a waiting task, and room under its limit.
func (l *lane) startable() bool {
	return (l.tasks.Len() > 0 || l.ready.Len() > 0) && l.underLimit()
}

// countEnded brings running up to date with the ends of the lane's tasks
// that workers counted, and reports whether any came since it last looked.
func (l *lane) countEnded() bool {
	ended := l.stats.ended.Load()
	if ended == l.endedSeen {
		return false
	}
	l.running -= int(ended - l.endedSeen)
	l.endedSeen = ended
	return true
}

// notePeak records a sub-pool's waiting tasks as its PeakWaiting if they
// are more. They are at most those accepted and neither started nor
// dropped, as its Status counts them, which includes a task on its way to
// a worker; and at most those in its lane and the hand-off buffer, which
// may hold other lanes' tasks. The lesser of the two is within the pool's
// bound. Status raises the peak too, to the Waiting it reports.
func (l *lane) notePeak(buffered int) {
	st := &l.stats
	n := int64(l.submitted) - int64(st.started.Load()) - int64(st.abandoned.Load())
	raise(&st.peakWaiting, min(n, int64(l.waiting+buffered)))
}

// underLimit reports whether one more of the lane's tasks may be out.
func (l *lane) underLimit() bool { return l.sub == nil || l.running < l.limit }

// keyed marks a keyed submission (job.line), whose line the dispatcher
// finds or makes from job.key.
var keyed = new(keyLine)

// front returns the task that goes next from the lane, which must be
// startable, ready to send; line is its key's line, or nil.
func (l *lane) front() (t job, line *keyLine) {
	if l.ready.Len() > 0 && (l.keyTurn || l.tasks.Len() == 0) {
		line = l.ready.Front()
		return job{fn: line.tasks.Front(), lane: l, line: line}, line
	}
	t = job{fn: l.tasks.Front(), lane: l}
	if t.fn == nil {
		t.w = l.waiters.Front()
	}
	return t, nil
}

// pop removes the task front returned, and gives the other kind of task
// the next turn.
func (l *lane) pop(line *keyLine) {
	l.waiting--
	if line != nil {
		l.ready.PopFront()
		line.tasks.PopFront()
		l.keyTurn = false
		return
	}
	if l.tasks.PopFront() == nil {
		l.waiters.PopFront()
	}
	l.keyTurn = true
}

// push appends an unkeyed task.
func (l *lane) push(t job) {
	if t.w != nil {
		l.waiters.PushBack(t.w)
	}
	l.tasks.PushBack(t.fn) // nil for a waiter
	l.waiting++
}

// pushFront puts an unkeyed task taken back at the front.
func (l *lane) pushFront(t job) {
	if t.w != nil {
		l.waiters.PushFront(t.w)
	}
	l.tasks.PushFront(t.fn)
	l.waiting++
}

// line returns key's line in the lane, made if it has none.
func (l *lane) line(key string, free *[]*keyLine) *keyLine {
	if line := l.keys[key]; line != nil {
		return line
	}
	if l.keys == nil {
		l.keys = make(map[string]*keyLine)
	}
	var line *keyLine
	if n := len(*free); n > 0 {
		line, *free = (*free)[n-1], (*free)[:n-1]
	} else {
		line = new(keyLine)
	}
	line.key, line.lane = key, l
	l.keys[key] = line
	l.peak = max(l.peak, len(l.keys))
	return line
}

// forget drops line, whose key has no task waiting or out, so that the key
// costs nothing, and keeps up to maxFreeLines lines, with their buffers, for
// keys to come. A map keeps the memory of the most keys it ever held, so
// once the lane holds a quarter of its peak, keys moves to a map of its
// present size, unless that peak is small enough to keep (smallKeyMap).
func (l *lane) forget(line *keyLine, free *[]*keyLine) {
	delete(l.keys, line.key)
	if len(*free) < maxFreeLines {
		*line = keyLine{tasks: line.tasks} // empty, its buffer kept
		*free = append(*free, line)
	}
	if n := len(l.keys); n < l.peak/4 && l.peak > smallKeyMap {
		keys := make(map[string]*keyLine, n)
		for k, v := range l.keys {
			keys[k] = v
		}
		l.keys, l.peak = keys, n
	}
}
