package workerpool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

func TestPauseWaitsForRunningTasksAndHoldsNewOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		for range 2 {
			require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		}
		start := time.Now()
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		assert.Equal(t, time.Second, time.Since(start), "Pause returns once running tasks finished")
		assert.Equal(t, workerpool.Paused, p.Status().State)

		var ran atomic.Int64
		for range 5 {
			require.NoError(t, p.Submit(func() { ran.Add(1) }))
		}
		time.Sleep(time.Hour)
		assert.Zero(t, ran.Load(), "no task is handed out while paused")
		assert.Equal(t, 5, p.WaitingQueueSize())

		resume()
		synctest.Wait()
		assert.Equal(t, int64(5), ran.Load())
		assert.Equal(t, workerpool.Running, p.Status().State)
		p.StopWait()
	})
}

func TestASecondPauseWaitsForTheFirstToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		ctx1, end1 := context.WithCancel(context.Background())
		p.Pause(ctx1)
		require.NoError(t, p.Submit(func() {}))

		ctx2, end2 := context.WithCancel(context.Background())
		second := make(chan struct{})
		go func() { p.Pause(ctx2); close(second) }()
		synctest.Wait()
		select {
		case <-second:
			t.Error("the second Pause returned during the first")
		default:
		}

		end1()
		<-second
		assert.Equal(t, workerpool.Paused, p.Status().State, "the second pause follows the first")
		assert.Equal(t, 1, p.WaitingQueueSize(), "with no task handed out in between")
		end2()
		synctest.Wait()
		assert.Zero(t, p.WaitingQueueSize())
		p.StopWait()
	})
}

func TestStopEndsPauses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stop   func(*workerpool.Pool) []func()
		ran    int64
		backed int
	}{
		{"StopWait runs the held tasks", func(p *workerpool.Pool) []func() { p.StopWait(); return nil }, 3, 0},
		{"Stop returns the held tasks", (*workerpool.Pool).Stop, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2)
				p.Pause(context.Background()) // never ends by itself
				var ran atomic.Int64
				for range 3 {
					require.NoError(t, p.Submit(func() { ran.Add(1) }))
				}
				queued := make(chan struct{})
				go func() { p.Pause(context.Background()); close(queued) }()
				synctest.Wait()

				assert.Len(t, tc.stop(p), tc.backed)
				assert.Equal(t, tc.ran, ran.Load())
				<-queued // a waiting Pause is released too
				p.Pause(context.Background())
				assert.Equal(t, workerpool.Stopped, p.Status().State, "Pause on a stopped pool returns at once")
			})
		})
	}
}

func TestResizeUpStartsWorkersForWaitingTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 5)
		synctest.Wait()
		require.Equal(t, 4, p.WaitingQueueSize())

		p.Resize(3)
		assert.Equal(t, 3, p.Size())
		s := p.Status()
		assert.Equal(t, 3, s.Busy)
		assert.Equal(t, 2, s.Waiting)
		assert.Equal(t, 3, s.MaxWorkers)
		release()
		p.StopWait()
	})
}

func TestResizeDownRetiresSurplusWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4, workerpool.WithIdleTimeout(-1))
		release := hold(t, p, 2)
		require.NoError(t, p.SubmitWait(func() {})) // starts a third worker, which idles
		synctest.Wait()
		require.Equal(t, workerpool.Status{Workers: 3, Busy: 2, Idle: 1}, pick(p.Status()))

		p.Resize(1)
		assert.Equal(t, workerpool.Status{Workers: 2, Busy: 2, Idle: 0}, pick(p.Status()),
			"idle surplus workers exit at once, busy ones keep running")

		var running, peak atomic.Int64
		for range 10 {
			require.NoError(t, p.Submit(func() {
				peak.Store(max(peak.Load(), running.Add(1)))
				time.Sleep(time.Millisecond)
				running.Add(-1)
			}))
		}
		release()
		synctest.Wait()
		assert.Equal(t, 1, p.Status().Workers, "busy surplus workers exit when their task ends")
		p.StopWait()
		assert.Equal(t, int64(1), peak.Load(), "tasks after the shrink run one at a time")
	})
}

// A busy worker that Resize makes surplus is told to exit, but that is not
// a task: while it finishes, the bounded queue has all its room, as Status,
// TrySubmit, Reject and Block all agree (the review's case: New(2,
// WithMaxWaiting(1)), both workers busy, Resize(1)).
func TestASurplusWorkerTakesNoRoomInTheQueue(t *testing.T) {
	for _, overflow := range []workerpool.Overflow{workerpool.Block, workerpool.Reject} {
		t.Run(overflow.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(overflow))
				release := hold(t, p, 2)
				p.Resize(1)
				synctest.Wait()
				assert.Equal(t, workerpool.Status{Workers: 2, Busy: 2, Idle: 0}, pick(p.Status()))
				assert.Zero(t, p.Status().Waiting)

				submitted := make(chan error, 1)
				go func() { submitted <- p.Submit(func() {}) }()
				synctest.Wait()
				select {
				case err := <-submitted:
					require.NoError(t, err, "the queue had room for one")
				default:
					t.Fatal("Submit waited though the queue had room")
				}
				assert.Equal(t, 1, p.Status().Waiting)
				assert.ErrorIs(t, p.TrySubmit(func() {}), workerpool.ErrQueueFull, "now the queue is full")
				assert.Equal(t, uint64(1), p.Status().Rejected, "the one TrySubmit refused")
				release()
				p.StopWait()
				s := p.Status()
				assert.Equal(t, uint64(3), s.Completed)
				assert.Equal(t, 1, s.PeakWaiting)
			})
		})
	}
}

func TestResizePanicsOnImpossibleSize(t *testing.T) {
	p := workerpool.New(4, workerpool.WithMinWorkers(2))
	defer p.Stop()
	assert.PanicsWithValue(t, "workerpool: Resize(0): the maximum must be at least 1 and at least MinWorkers (2)", func() { p.Resize(0) })
	assert.Panics(t, func() { p.Resize(1) })
	assert.NotPanics(t, func() { p.Resize(2) })
}

func TestStatusCountersBalanceAtRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithMaxWaiting(3), workerpool.WithOverflow(workerpool.Reject), workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
		for range 4 {
			require.NoError(t, p.SubmitWait(func() {}))
		}
		require.NoError(t, p.Submit(func() { panic("boom") }))
		synctest.Wait()
		release := hold(t, p, 5) // 2 busy, 3 waiting
		assert.ErrorIs(t, p.Submit(func() {}), workerpool.ErrQueueFull)
		synctest.Wait()

		s := p.Status()
		assert.Equal(t, workerpool.Status{
			State: workerpool.Running, MaxWorkers: 2, MinWorkers: 0,
			Workers: 2, Busy: 2, Idle: 0, Waiting: 3,
			PeakWorkers: 2, PeakWaiting: 3,
			Submitted: 10, Completed: 5, Panicked: 1,
			Rejected: 1, Abandoned: 0,
		}, s)
		assertBalanced(t, s)

		stopped := make(chan []func())
		go func() { stopped <- p.Stop() }()
		synctest.Wait()
		release()
		assert.Len(t, <-stopped, 3, "Stop drops the waiting tasks and lets running ones finish")
		s = p.Status()
		assert.Equal(t, uint64(3), s.Abandoned)
		assert.Equal(t, workerpool.Stopped, s.State)
		assert.Zero(t, s.Workers)
		assertBalanced(t, s)
	})
}

// Once Pause returns, Status says Paused: the dispatcher records the state
// before it lets Pause return. Real scheduler, many times over: a Status
// read the moment Pause returns must not see the state before it.
func TestStatusSaysPausedOncePauseReturns(t *testing.T) {
	p := workerpool.New(2)
	defer p.Stop()
	for i := range 20000 {
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		if s := p.Status().State; s != workerpool.Paused {
			t.Fatalf("pause %d: State = %v once Pause returned", i, s)
		}
		resume()
	}
}
