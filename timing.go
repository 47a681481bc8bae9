package workerpool

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// Task timings. With [WithTaskTimings], the pool measures how long each
// task waited (from when the pool accepted it to when a worker started it)
// and how long it ran, and sums them up in [Status], for the pool and for
// each sub-pool, and hands them to the observer of [WithTaskObserver].
// Without it, the pool reads no clock for its tasks, and none of this
// costs anything.

// TimingBounds are the upper bounds of the duration buckets in a [Timing]:
// from a microsecond to five minutes, about three to a decade.
var TimingBounds = [...]time.Duration{
	time.Microsecond, 2500 * time.Nanosecond, 5 * time.Microsecond,
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute,
	2 * time.Minute, 5 * time.Minute,
}

// A Timing sums up how long tasks waited, or ran: their number, the total
// and the longest, and how many fell in each bucket. Total/Count is the
// mean; a rate of Total over a rate of Count, the mean over a window.
type Timing struct {
	Count uint64
	Total time.Duration
	Max   time.Duration
	// Buckets[i] counts the durations above TimingBounds[i-1] (or 0) and at
	// most TimingBounds[i]; the last counts those above every bound.
	Buckets [len(TimingBounds) + 1]uint64
}

// A TaskTiming is how long one task waited and ran, for the observer of
// [WithTaskObserver].
type TaskTiming struct {
	Subpool  *Subpool      // the task's sub-pool; nil for the pool's own, or once its sub-pool was stopped and dropped
	Level    int           // the task's priority level (see [Pool.Priority])
	Wait     time.Duration // from when the pool accepted it to when it started
	Run      time.Duration // from when it started to when it ended
	Panicked bool          // it panicked (it counts as run all the same)
}

// timingStats is a Timing as workers add to it: with atomics, read one by
// one by Status.
type timingStats struct {
	total, max atomic.Int64
	buckets    [len(TimingBounds) + 1]atomic.Uint64
}

// add counts one duration.
func (s *timingStats) add(d time.Duration) {
	i := 0
	for i < len(TimingBounds) && d > TimingBounds[i] {
		i++
	}
	s.buckets[i].Add(1)
	s.total.Add(int64(d))
	raise(&s.max, int64(d))
}

// snapshot returns the Timing. Its count is the sum of its buckets, read
// first, so that a histogram made of it is consistent; Total and Max,
// read after, may already include a duration being counted.
func (s *timingStats) snapshot() Timing {
	var t Timing
	for i := range s.buckets {
		t.Buckets[i] = s.buckets[i].Load()
		t.Count += t.Buckets[i]
	}
	t.Total = time.Duration(s.total.Load())
	t.Max = time.Duration(s.max.Load())
	return t
}

// taskTimings is what a pool or a sub-pool sums up of its tasks' timings:
// and their waits by level, once it has levels.
type taskTimings struct {
	wait, run timingStats
	levels    levelWaits
}

// raise sets peak to n if n is higher, and returns the peak. Several
// goroutines may raise it at once; it never falls.
func raise(peak *atomic.Int64, n int64) int64 {
	for {
		old := peak.Load()
		if n <= old {
			return old
		}
		if peak.CompareAndSwap(old, n) {
			return n
		}
	}
}

// levelWaits sums up how long tasks waited, by priority level, once a
// [Level] was made on a pool that times its tasks: the levels its Levels
// submit at, and 0. Workers read the table without a lock; a new level
// publishes a new table, so a table is never written once published.
type levelWaits struct {
	mu    sync.Mutex
	table atomic.Pointer[map[int32]*timingStats]
}

// add counts d as the wait of a task of level, if the level has a sum.
func (w *levelWaits) add(level int32, d time.Duration) {
	if t := w.table.Load(); t != nil {
		if s := (*t)[level]; s != nil {
			s.add(d)
		}
	}
}

// keep gives level, and 0, a sum, if they have none.
func (w *levelWaits) keep(level int32) {
	if t := w.table.Load(); t != nil && (*t)[level] != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	table := map[int32]*timingStats{0: {}}
	if t := w.table.Load(); t != nil {
		maps.Copy(table, *t)
	}
	if table[level] == nil {
		table[level] = new(timingStats)
	}
	w.table.Store(&table)
}

// snapshot returns each level's Timing, or nil if no level has a sum.
func (w *levelWaits) snapshot() map[int]Timing {
	t := w.table.Load()
	if t == nil {
		return nil
	}
	m := make(map[int]Timing, len(*t))
	for level, s := range *t {
		m[int(level)] = s.snapshot()
	}
	return m
}
