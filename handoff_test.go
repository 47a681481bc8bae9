package workerpool_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests in this file submit tasks while every worker is busy, so that
// they wait in the pool's hand-off buffer rather than its queue, and check
// that a pause, a stop and a Shutdown deadline hold them back as they would
// hold back queued tasks.

func TestPauseHoldsTasksThatWaitedBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		release := hold(t, p, 2)
		var mu sync.Mutex
		var order []int
		for i := range 10 { // every worker is busy: these wait
			require.NoError(t, p.Submit(func() { mu.Lock(); order = append(order, i); mu.Unlock() }))
		}
		synctest.Wait()
		require.Equal(t, 10, p.WaitingQueueSize())

		ctx, resume := context.WithCancel(context.Background())
		paused := make(chan struct{})
		go func() { p.Pause(ctx); close(paused) }()
		synctest.Wait()
		release() // the running tasks end: Pause returns, and nothing starts
		<-paused
		time.Sleep(time.Hour)
		mu.Lock()
		assert.Empty(t, order, "no waiting task started during the pause")
		mu.Unlock()
		assert.Equal(t, 10, p.WaitingQueueSize())
		assert.Zero(t, p.Status().Busy)

		resume()
		p.StopWait()
		assert.Len(t, order, 10)
	})
}

func TestStopReturnsTasksThatWaitedForABusyWorkerInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(3)
		release := hold(t, p, 3)
		var got []int
		for i := range 100 {
			require.NoError(t, p.Submit(func() { got = append(got, i) }))
		}
		synctest.Wait()
		stopped := make(chan []func())
		go func() { stopped <- p.Stop() }()
		synctest.Wait()
		release()
		for _, task := range <-stopped {
			task()
		}
		want := make([]int, 100)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, got, "every waiting task came back, in order, and none ran")
		assert.Equal(t, uint64(100), p.Status().Abandoned)
	})
}

// TestNoWaitingTaskStartsAfterAShutdownDeadlineAsManyWorkersComeFree has
// eight workers end their tasks exactly at the deadline, with a hundred
// tasks waiting behind them: none may start, and all come back in order.
func TestNoWaitingTaskStartsAfterAShutdownDeadlineAsManyWorkersComeFree(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(8)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for range 8 {
				require.NoError(t, p.Submit(func() { <-ctx.Done() }))
			}
			var started atomic.Int64
			var identifying bool // set once the pool has stopped
			var got []int
			for i := range 100 {
				require.NoError(t, p.Submit(func() {
					if identifying {
						got = append(got, i)
						return
					}
					started.Add(1)
				}))
			}
			waitErr := make(chan error)
			go func() { waitErr <- p.SubmitWait(func() { t.Error("a waiting SubmitWait task ran") }) }()
			synctest.Wait()
			tasks, err := p.Shutdown(ctx)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.ErrorIs(t, <-waitErr, workerpool.ErrStopped)
			assert.Zero(t, started.Load(), "no waiting task started after the deadline")
			require.Len(t, tasks, 100)
			identifying = true // calling them now records their order
			for _, task := range tasks {
				task()
			}
			want := make([]int, 100)
			for i := range want {
				want[i] = i
			}
			assert.Equal(t, want, got, "in the order they were submitted")
			assert.Equal(t, uint64(101), p.Status().Abandoned)
		})
	}
}

func TestABoundedQueueCountsEveryWaitingTaskAgainstItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithMaxWaiting(5), workerpool.WithOverflow(workerpool.Reject))
		release := hold(t, p, 2+5)
		synctest.Wait()
		assert.Equal(t, 5, p.WaitingQueueSize())
		assert.ErrorIs(t, p.Submit(func() {}), workerpool.ErrQueueFull, "five wait: the queue is full")
		s := p.Status()
		assert.Equal(t, 5, s.Waiting)
		assert.Equal(t, 5, s.PeakWaiting)
		release()
		p.StopWait()
	})
}

func TestABlockedSubmitterGetsInAsSoonAsAWaitingTaskStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(3))
		for range 4 { // one runs, three wait: full
			require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		}
		start := time.Now()
		require.NoError(t, p.Submit(func() {}))
		assert.Equal(t, time.Second, time.Since(start), "accepted when the first task ended and the second started")
		p.StopWait()
		assert.Equal(t, 3, p.Status().PeakWaiting)
	})
}
