package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests in this file stop a pool, or a sub-pool, while its workers take
// tasks from the hand-off buffer as fast as they can, on the real scheduler,
// so that workers and the dispatcher really do race for the buffer's tasks.
// Their assertions hold for every interleaving.

// numbered submits the tasks 0, 1, 2, ... to q, one at a time, until q
// refuses one, and returns how many it accepted. Task i records in
// started[i] that it started. Once identify is set, a task records its
// number in *called instead, so that the tasks a stop returns can be named.
func numbered(q workerpool.Submitter, started []atomic.Int32, identify *atomic.Bool, called *[]int) (accepted int, err error) {
	for i := range started {
		err := q.Submit(func() {
			if identify.Load() {
				*called = append(*called, i)
				return
			}
			started[i].Add(1)
			runtime.Gosched() // let the buffer fill while this worker is busy
		})
		if err != nil {
			return i, err
		}
	}
	return len(started), nil
}

// TestAStopCutsTheQueueBetweenTheTasksThatStartAndThoseItReturns checks
// the hand-off buffer's cut: the tasks that start are exactly a prefix of
// the ones accepted, and those returned are the rest, in order, whatever
// workers took from the buffer as the stop took it back. A Shutdown
// deadline cuts by the clock instead: a worker that takes a task once the
// deadline has passed drops it, while one that took a later task just
// before may have started it; there, every accepted task starts once or
// comes back once, and those that come back are in order.
func TestAStopCutsTheQueueBetweenTheTasksThatStartAndThoseItReturns(t *testing.T) {
	const n = 20_000
	for _, tc := range []struct {
		name    string
		stop    func(p *workerpool.Pool, a *workerpool.Subpool) []func()
		byClock bool // a deadline, not an order, decides what starts
	}{
		{"pool Stop", func(p *workerpool.Pool, _ *workerpool.Subpool) []func() { return p.Stop() }, false},
		{"pool Shutdown past its deadline", func(p *workerpool.Pool, _ *workerpool.Subpool) []func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Microsecond)
			defer cancel()
			tasks, _ := p.Shutdown(ctx)
			return tasks
		}, true},
		{"sub-pool Stop", func(_ *workerpool.Pool, a *workerpool.Subpool) []func() { return a.Stop() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for round := range 20 {
				p := workerpool.New(4, workerpool.WithMaxWaiting(64))
				a := p.Subpool("a", 3)
				var q workerpool.Submitter = p
				if tc.name == "sub-pool Stop" {
					q = a
				}
				started := make([]atomic.Int32, n)
				var identify atomic.Bool
				var called []int
				var accepted int
				var err error
				submitted := make(chan struct{})
				go func() {
					defer close(submitted)
					accepted, err = numbered(q, started, &identify, &called)
				}()
				for a.Status().Completed+p.Status().Completed < 200 && !isDone(submitted) {
					runtime.Gosched() // stop mid-stream; any point is valid
				}
				returned := tc.stop(p, a)
				<-submitted
				p.Stop()
				require.ErrorIs(t, err, workerpool.ErrStopped, "round %d: the submitter ran out of tasks before the stop", round)

				identify.Store(true)
				for _, task := range returned {
					task()
				}
				if tc.byClock {
					require.True(t, slices.IsSorted(called), "round %d: the tasks returned are in order: %v", round, called)
					for i := range accepted {
						n := started[i].Load()
						if slices.Contains(called, i) {
							n++
						}
						require.Equal(t, int32(1), n, "round %d: task %d started or came back %d times in all", round, i, n)
					}
					require.Len(t, called, len(slices.Compact(slices.Clone(called))), "round %d: a task came back twice", round)
					continue
				}
				ran := 0
				for ran < accepted && started[ran].Load() == 1 {
					ran++
				}
				for i := range accepted {
					require.LessOrEqual(t, started[i].Load(), int32(1), "round %d: task %d ran twice", round, i)
					if i >= ran {
						require.Zero(t, started[i].Load(), "round %d: task %d started after task %d was dropped", round, i, ran)
					}
				}
				var want []int
				for i := ran; i < accepted; i++ {
					want = append(want, i)
				}
				require.Equal(t, want, called, "round %d: %d of %d accepted started; the stop returns the rest, in order", round, ran, accepted)
			}
		})
	}
}

// TestSubpoolStopsRacingThePoolsStopLoseNothing has a sub-pool's Stop and
// StopWait race the pool's Stop and submitters to both: every accepted task
// runs once or comes back from exactly one of the stops, each sub-pool's
// tasks in order, and the counts add up in both Status snapshots.
func TestSubpoolStopsRacingThePoolsStopLoseNothing(t *testing.T) {
	for round := range rounds(50) {
		p := workerpool.New(3, workerpool.WithMaxWaiting(32))
		a := p.Subpool("a", 2)
		const each = 5000
		var runs [2][each]atomic.Int32
		var accepted [2]atomic.Int64
		var submitters sync.WaitGroup
		for q, to := range []workerpool.Submitter{p, a} {
			submitters.Go(func() {
				for i := range each {
					var err error
					if i%2 == 0 {
						err = to.Submit(func() { runs[q][i].Add(1) })
					} else {
						err = to.SubmitKey(fmt.Sprint(i%4), func() { runs[q][i].Add(1) })
					}
					if errors.Is(err, workerpool.ErrStopped) {
						return
					}
					if !assert.NoError(t, err) {
						return
					}
					accepted[q].Add(1)
				}
			})
		}
		for p.Status().Completed < 100 {
			runtime.Gosched()
		}
		var fromA, fromP []func()
		var stoppers sync.WaitGroup
		stoppers.Go(func() { fromA = a.Stop() })
		stoppers.Go(a.StopWait)
		stoppers.Go(func() { fromP = p.Stop() })
		stoppers.Wait()
		submitters.Wait()
		for _, task := range slices.Concat(fromA, fromP) {
			task()
		}
		for q := range runs {
			var ran int64
			for i := range runs[q] {
				n := runs[q][i].Load()
				require.LessOrEqual(t, n, int32(1), "round %d: queue %d's task %d ran twice", round, q, i)
				ran += int64(n)
			}
			assert.Equal(t, accepted[q].Load(), ran, "round %d: queue %d: every accepted task ran once, on a worker or from a stop", round, q)
		}
		st, ps := a.Status(), p.Status()
		assert.Equal(t, st.Submitted, st.Completed+st.Abandoned, "round %d: the sub-pool at rest: %+v", round, st)
		assert.Equal(t, ps.Submitted, ps.Completed+ps.Abandoned, "round %d: the pool at rest: %+v", round, ps)
		assert.Equal(t, uint64(len(fromA)+len(fromP)), ps.Abandoned, "round %d: each dropped task came back once", round)
		assert.Equal(t, workerpool.Stopped, st.State)
	}
}
