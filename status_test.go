package workerpool_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// watchStatus reads status in a loop, on the real scheduler, until the
// returned stop is called, and has inRange judge every snapshot against
// the one before. stop fails the test if any snapshot was out of range.
func watchStatus(t *testing.T, status func() workerpool.Status, inRange func(s, last workerpool.Status) bool) (stop func()) {
	var done atomic.Bool
	var snapshots, nbad int
	var bad []workerpool.Status // the first few out of range
	var reader sync.WaitGroup
	reader.Go(func() {
		var last workerpool.Status
		for !done.Load() {
			s := status()
			snapshots++
			if !inRange(s, last) {
				if nbad++; len(bad) < 5 {
					bad = append(bad, s)
				}
			}
			last = s
			runtime.Gosched() // on one P, let the pool run between looks
		}
	})
	end := func() { done.Store(true); reader.Wait() }
	t.Cleanup(end) // should the test end before stop
	return func() {
		t.Helper()
		end()
		t.Logf("%d snapshots", snapshots)
		assert.Zero(t, nbad, "snapshots out of range; the first: %+v", bad)
	}
}

// TestStatusGaugesStayInRangeInEverySnapshot reads Status in a loop while
// submitters and workers move tasks as fast as they can, on the real
// scheduler: a dashboard must never see an impossible number.
func TestStatusGaugesStayInRangeInEverySnapshot(t *testing.T) {
	const max, submitters, each = 4, 8, 20000
	p := workerpool.New(max)
	var wg sync.WaitGroup
	for range submitters {
		wg.Go(func() {
			for i := range each {
				if i%16 == 0 {
					_ = p.SubmitWait(func() {})
				} else {
					_ = p.Submit(func() {})
				}
			}
		})
	}
	stop := watchStatus(t, p.Status, func(s, last workerpool.Status) bool {
		return s.Busy >= 0 && s.Busy <= s.Workers && s.Idle == s.Workers-s.Busy && s.Workers <= max &&
			s.Waiting >= 0 && s.Completed <= s.Submitted && s.Completed >= last.Completed && s.Submitted >= last.Submitted
	})
	wg.Wait()
	p.StopWait()
	stop()
}

// TestStatusStaysInRangeUnderResizeReapingAndGoexitChurn is the same check
// while workers come and go: resizes up and down, reaping after a
// millisecond, tasks that panic or call runtime.Goexit, and a stop at the
// end.
func TestStatusStaysInRangeUnderResizeReapingAndGoexitChurn(t *testing.T) {
	const maxSize = 8
	p := workerpool.New(maxSize, workerpool.WithIdleTimeout(time.Millisecond),
		workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
	var wg sync.WaitGroup
	for s := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				switch (s + i) % 7 {
				case 0:
					_ = p.Submit(func() { panic("churn") })
				case 1:
					_ = p.Submit(runtime.Goexit)
				case 2:
					_ = p.SubmitWait(func() { time.Sleep(10 * time.Microsecond) })
				default:
					_ = p.Submit(func() {})
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			p.Resize(1 + i%maxSize)
			time.Sleep(50 * time.Microsecond)
		}
	})
	stop := watchStatus(t, p.Status, func(s, last workerpool.Status) bool {
		return s.Busy >= 0 && s.Busy <= s.Workers && s.Idle == s.Workers-s.Busy && s.Workers <= maxSize &&
			s.Workers <= s.PeakWorkers && s.Waiting <= s.PeakWaiting && s.Completed <= s.Submitted &&
			s.Panicked <= s.Completed && s.Completed >= last.Completed && s.Submitted >= last.Submitted
	})
	wg.Wait()
	p.StopWait()
	stop()
	s := p.Status()
	t.Logf("%+v", s)
	require.Equal(t, s.Submitted, s.Completed, "StopWait ran everything")
	require.Zero(t, s.Workers)
}

// subpoolFlood has six submitters flood p, its sub-pool a and another
// one, keyed and not, with tasks that return or panic, each way of
// submitting, and returns once they are done.
func subpoolFlood(p *workerpool.Pool, a *workerpool.Subpool) (wait func()) {
	targets := []workerpool.Submitter{p, a, p.Subpool("b", 3)}
	var wg sync.WaitGroup
	for s := range 6 {
		to := targets[s%3]
		wg.Go(func() {
			for i := range rounds(20000) {
				switch i % 5 {
				case 0:
					_ = to.SubmitKey(fmt.Sprint(i%3), func() {})
				case 1:
					_ = to.Submit(func() { panic("churn") })
				case 2:
					_ = to.SubmitWait(func() {})
				default:
					_ = to.Submit(func() {})
				}
			}
		})
	}
	return wg.Wait
}

// TestSubpoolStatusStaysInRangeInEverySnapshot reads a sub-pool's Status
// in a loop while submitters flood it, the pool and another sub-pool: no
// gauge is negative, Waiting <= PeakWaiting, and its counters never
// decrease. (Busy within the limit and Panicked <= Completed: see the next
// test.)
func TestSubpoolStatusStaysInRangeInEverySnapshot(t *testing.T) {
	const limit = 2
	p := workerpool.New(4, workerpool.WithMaxWaiting(3), // Block
		workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
	a := p.Subpool("a", limit)
	wait := subpoolFlood(p, a)
	stop := watchStatus(t, a.Status, func(s, last workerpool.Status) bool {
		return s.Busy >= 0 && s.MaxWorkers == limit && s.Waiting >= 0 && s.Waiting <= s.PeakWaiting &&
			s.Completed <= s.Submitted &&
			s.Panicked >= last.Panicked && s.Completed >= last.Completed && s.Submitted >= last.Submitted
	})
	wait()
	p.StopWait()
	stop()
	st := a.Status()
	require.Equal(t, st.Submitted, st.Completed, "StopWait ran everything: %+v", st)
}

// TestBusyAndWaitingStayWithinTheirBoundsInEverySnapshot reads the Status
// of a pool with sub-pools, and of one of them, in a loop while submitters
// flood them against a bound of three: no snapshot shows more of the
// sub-pool's tasks running than its limit (as Subpool.Status promises) or
// more of them panicked than completed, more than three tasks waiting, or a PeakWaiting above three, and a
// sub-pool's PeakWaiting, the highest Waiting seen, never falls.
func TestBusyAndWaitingStayWithinTheirBoundsInEverySnapshot(t *testing.T) {
	const bound, limit = 3, 2
	p := workerpool.New(4, workerpool.WithMaxWaiting(bound), // Block
		workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
	a := p.Subpool("a", limit)
	wait := subpoolFlood(p, a)
	inBound := func(s, last workerpool.Status) bool {
		return s.Waiting <= bound && s.PeakWaiting <= bound && s.PeakWaiting >= last.PeakWaiting
	}
	stopA := watchStatus(t, a.Status, func(s, last workerpool.Status) bool {
		return inBound(s, last) && s.Busy <= limit && s.Panicked <= s.Completed
	})
	stopP := watchStatus(t, p.Status, inBound)
	wait()
	p.StopWait()
	stopA()
	stopP()
}

// TestSubmitWaitReturnsWithItsTaskCompletedInStatus checks that Status does
// not lag a SubmitWait or a Future: once they return, the task is counted.
func TestSubmitWaitReturnsWithItsTaskCompletedInStatus(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	for i := range 2000 {
		if i%2 == 0 {
			require.NoError(t, p.SubmitWait(func() {}))
		} else {
			_, err := workerpool.Go(p, func() (int, error) { return i, nil }).Wait()
			require.NoError(t, err)
		}
		s := p.Status()
		require.Equal(t, uint64(i+1), s.Completed, "after %d calls returned", i+1)
		require.Equal(t, uint64(i+1), s.Submitted)
	}
}

// Once a sub-pool's Stop or StopWait returns, its Status says Stopped, on
// the real scheduler, many times over.
func TestASubpoolsStatusSaysStoppedOnceItsStopReturns(t *testing.T) {
	p := workerpool.New(2)
	defer p.Stop()
	for i := range 5000 {
		s := p.Subpool("s", 1)
		require.NoError(t, s.Submit(func() {}))
		if i%2 == 0 {
			s.Stop()
		} else {
			s.StopWait()
		}
		if st := s.Status().State; st != workerpool.Stopped {
			t.Fatalf("round %d: State = %v once its stop returned", i, st)
		}
	}
}

// Once the SubmitWait of a task that waited in the queue returns, the task
// no longer counts as waiting: the dispatcher publishes it gone before it
// hands it out, so the worker cannot run it, nor its caller look, first.
// Real scheduler, many rounds: the window was a few instructions wide.
func TestATaskThatWaitedNoLongerCountsAsWaitingOnceItsSubmitWaitReturns(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	for range 3000 {
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- p.SubmitWait(func() {}) }()
		}
		for p.Status().Waiting < 2 {
			runtime.Gosched()
		}
		resume()
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		s := p.Status()
		require.Zero(t, s.Waiting, "%+v", s)
		require.Equal(t, s.Submitted, s.Completed, "%+v", s)
	}
}
