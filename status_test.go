package workerpool_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

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
