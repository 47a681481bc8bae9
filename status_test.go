package workerpool_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

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
	var stop atomic.Bool
	var snapshots, nbad int
	var bad []workerpool.Status // the first few out of range
	var reader sync.WaitGroup
	reader.Go(func() {
		var last workerpool.Status
		for !stop.Load() {
			s := p.Status()
			snapshots++
			if s.Busy < 0 || s.Busy > s.Workers || s.Idle != s.Workers-s.Busy || s.Workers > max ||
				s.Waiting < 0 || s.Completed > s.Submitted || s.Completed < last.Completed || s.Submitted < last.Submitted {
				if nbad++; len(bad) < 5 {
					bad = append(bad, s)
				}
			}
			last = s
			runtime.Gosched() // on one P, let the pool run between looks
		}
	})
	wg.Wait()
	p.StopWait()
	stop.Store(true)
	reader.Wait()
	t.Logf("%d snapshots", snapshots)
	require.Zero(t, nbad, "snapshots out of range; the first: %+v", bad)
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
	var stop atomic.Bool
	var nbad, snapshots int
	var bad []workerpool.Status
	var reader sync.WaitGroup
	reader.Go(func() {
		var last workerpool.Status
		for !stop.Load() {
			s := p.Status()
			snapshots++
			if s.Busy < 0 || s.Busy > s.Workers || s.Idle != s.Workers-s.Busy || s.Workers > maxSize ||
				s.Workers > s.PeakWorkers || s.Waiting > s.PeakWaiting || s.Completed > s.Submitted ||
				s.Panicked > s.Completed || s.Completed < last.Completed || s.Submitted < last.Submitted {
				if nbad++; len(bad) < 5 {
					bad = append(bad, s)
				}
			}
			last = s
			runtime.Gosched()
		}
	})
	wg.Wait()
	p.StopWait()
	stop.Store(true)
	reader.Wait()
	s := p.Status()
	t.Logf("%d snapshots; %+v", snapshots, s)
	require.Zero(t, nbad, "snapshots out of range; the first: %+v", bad)
	require.Equal(t, s.Submitted, s.Completed, "StopWait ran everything")
	require.Zero(t, s.Workers)
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
