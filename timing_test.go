package workerpool_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// On the fake clock, each task's wait (accepted to started) and run
// (started to ended) are exact: the sums, counts, maxima and buckets in
// Status, the pool's and the sub-pool's, add up to them.
func TestStatusSumsUpHowLongTasksWaitedAndRan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithTaskTimings())
		s := p.Subpool("s", 1)
		sleep := func(d time.Duration) func() { return func() { time.Sleep(d) } }
		require.NoError(t, p.Submit(sleep(2*time.Second)))       // waits 0, runs 2s
		require.NoError(t, s.Submit(sleep(3*time.Second)))       // waits 2s, runs 3s
		require.NoError(t, p.Submit(sleep(10*time.Millisecond))) // waits 5s, runs 10ms
		p.StopWait()

		st := p.Status()
		assert.Equal(t, uint64(3), st.Wait.Count)
		assert.Equal(t, 7*time.Second, st.Wait.Total)
		assert.Equal(t, 5*time.Second, st.Wait.Max)
		assert.Equal(t, uint64(3), st.Run.Count)
		assert.Equal(t, 5*time.Second+10*time.Millisecond, st.Run.Total)
		assert.Equal(t, 3*time.Second, st.Run.Max)
		assert.Equal(t, uint64(1), st.Wait.Buckets[0], "a wait of 0 is in the first bucket")
		assert.Equal(t, uint64(1), st.Run.Buckets[bucketOf(10*time.Millisecond)])
		var n uint64
		for _, c := range st.Run.Buckets {
			n += c
		}
		assert.Equal(t, st.Run.Count, n, "every run in one bucket")

		sub := s.Status()
		assert.Equal(t, workerpool.Timing{Count: 1, Total: 2 * time.Second, Max: 2 * time.Second, Buckets: bucket(2 * time.Second)}, sub.Wait)
		assert.Equal(t, workerpool.Timing{Count: 1, Total: 3 * time.Second, Max: 3 * time.Second, Buckets: bucket(3 * time.Second)}, sub.Run)
	})
}

// bucketOf returns the index of d's bucket in a Timing.
func bucketOf(d time.Duration) int {
	for i, b := range workerpool.TimingBounds {
		if d <= b {
			return i
		}
	}
	return len(workerpool.TimingBounds)
}

// bucket returns buckets holding d alone.
func bucket(d time.Duration) (b [len(workerpool.TimingBounds) + 1]uint64) {
	b[bucketOf(d)] = 1
	return b
}

func TestWithoutTaskTimingsStatusHasNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		p.StopWait()
		st := p.Status()
		assert.Zero(t, st.Wait)
		assert.Zero(t, st.Run)
	})
}

// The observer gets every task's timing, on the goroutine that ran it,
// before the task's waiter learns it ended.
func TestTheObserverGetsEveryTasksTimingBeforeItsWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []workerpool.TaskTiming
		p := workerpool.New(2, workerpool.WithTaskObserver(func(tt workerpool.TaskTiming) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, tt)
		}))
		s := p.Subpool("s", 2)
		require.NoError(t, s.SubmitWait(func() { time.Sleep(time.Second) }))
		mu.Lock()
		require.Len(t, seen, 1, "the observer ran before SubmitWait returned")
		assert.Equal(t, workerpool.TaskTiming{Subpool: s, Run: time.Second}, seen[0])
		mu.Unlock()
		assert.Error(t, p.SubmitWait(func() { panic("boom") }))
		p.StopWait()
		require.Len(t, seen, 2)
		assert.True(t, seen[1].Panicked)
		assert.Nil(t, seen[1].Subpool)
		assert.Equal(t, uint64(2), p.Status().Run.Count, "the observer implies timings")
	})
}

func ExampleWithTaskTimings() {
	p := workerpool.New(2, workerpool.WithTaskTimings())
	for range 10 {
		p.Submit(func() { time.Sleep(time.Millisecond) })
	}
	p.StopWait()

	// Status sums up how long tasks waited and ran: a count, a total, a
	// maximum, and buckets for a histogram (see TimingBounds).
	s := p.Status()
	fmt.Println("timed:", s.Wait.Count, "waits,", s.Run.Count, "runs")
	fmt.Println("ran 1ms or more each:", s.Run.Total >= 10*time.Millisecond)
	// Output:
	// timed: 10 waits, 10 runs
	// ran 1ms or more each: true
}
