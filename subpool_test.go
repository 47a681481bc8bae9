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

func TestASubpoolNeverRunsMoreThanItsLimitNorThePoolMoreThanItsMaximum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(5)
		a, b := p.Subpool("a", 2), p.Subpool("b", 4)
		var all, inA, inB peakCounter
		task := func(c *peakCounter) func() {
			return func() {
				all.enter()
				c.enter()
				time.Sleep(time.Duration(1+all.now.Load()) * time.Millisecond)
				c.leave()
				all.leave()
			}
		}
		for range 50 {
			require.NoError(t, a.Submit(task(&inA)))
			require.NoError(t, b.Submit(task(&inB)))
			require.NoError(t, p.Submit(task(&peakCounter{})))
		}
		p.StopWait()
		assert.LessOrEqual(t, inA.peak.Load(), int64(2), "never more than a's limit")
		assert.LessOrEqual(t, inB.peak.Load(), int64(4), "never more than b's limit")
		assert.Equal(t, int64(5), all.peak.Load(), "all together reach the pool's maximum and no more")
		assert.Equal(t, uint64(150), p.Status().Completed)
	})
}

func TestASubpoolAtItsLimitIsSkippedUntilOneOfItsTasksEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		a := p.Subpool("a", 1)
		block := make(chan struct{})
		var s starts
		require.NoError(t, a.Submit(func() { <-block }))
		require.NoError(t, a.Submit(s.task("a2")))
		for _, name := range []string{"p1", "p2", "p3"} {
			require.NoError(t, p.Submit(s.task(name)))
		}
		synctest.Wait()
		assert.Equal(t, []string{"p1", "p2", "p3"}, s.got(), "a is at its limit: the pool's tasks go")
		st := a.Status()
		assert.Equal(t, 1, st.Busy)
		assert.Equal(t, 1, st.Waiting, "a task held back by its sub-pool's limit waits")
		assert.Equal(t, 1, p.Status().Waiting, "in the pool's Status too")
		close(block)
		synctest.Wait()
		assert.Equal(t, []string{"p1", "p2", "p3", "a2"}, s.got())
		p.StopWait()
	})
}

func TestRaisingASubpoolsLimitStartsItsWaitingTasksAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		a := p.Subpool("a", 1)
		block := make(chan struct{})
		for range 5 {
			require.NoError(t, a.Submit(func() { <-block }))
		}
		synctest.Wait()
		require.Equal(t, 1, a.Status().Busy)
		a.Resize(3)
		st := a.Status()
		assert.Equal(t, 3, st.Busy, "at once: Resize returns once they started")
		assert.Equal(t, 2, st.Waiting)
		assert.Equal(t, 3, st.MaxWorkers)
		close(block)
		p.StopWait()
		assert.Equal(t, uint64(5), a.Status().Completed)
	})
}

func TestRaisingASubpoolsLimitWhileThePoolIsPausedStartsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		a := p.Subpool("a", 1)
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		var ran atomic.Int64
		for range 5 {
			require.NoError(t, a.Submit(func() { ran.Add(1); time.Sleep(time.Second) }))
		}
		a.Resize(3)
		time.Sleep(time.Hour)
		assert.Zero(t, ran.Load())
		resume()
		synctest.Wait()
		assert.Equal(t, int64(3), ran.Load(), "three start on resume")
		p.StopWait()
		assert.Equal(t, int64(5), ran.Load())
	})
}

func TestTheBoundOnWaitingTasksCoversSubpoolsAndKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(4), workerpool.WithOverflow(workerpool.Reject))
		a := p.Subpool("a", 1)
		release := hold(t, p, 1) // the one worker is busy
		require.NoError(t, p.Submit(func() {}))
		require.NoError(t, a.Submit(func() {}))
		require.NoError(t, a.SubmitKey("k", func() {}))
		require.NoError(t, p.SubmitKey("k", func() {}))
		synctest.Wait()
		assert.Equal(t, 4, p.Status().Waiting)
		assert.ErrorIs(t, a.Submit(func() {}), workerpool.ErrQueueFull, "four wait: full, whoever submits")
		assert.ErrorIs(t, p.TrySubmit(func() {}), workerpool.ErrQueueFull)
		assert.Equal(t, uint64(1), a.Status().Rejected)
		assert.Equal(t, uint64(2), p.Status().Rejected, "the pool's Status counts every rejection")
		release()
		p.StopWait()
		assert.Equal(t, uint64(5), p.Status().Completed)
	})
}

func TestGoMapAndGroupRunOnASubpool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		a := p.Subpool("a", 2)
		var in peakCounter
		v, err := workerpool.Go(a, func() (int, error) { return 42, nil }).Wait()
		assert.Equal(t, 42, v)
		assert.NoError(t, err)
		out, err := workerpool.Map(context.Background(), a, make([]int, 20), func(_ context.Context, _ int) (int, error) {
			in.enter()
			defer in.leave()
			time.Sleep(time.Millisecond)
			return 1, nil
		})
		assert.NoError(t, err)
		assert.Len(t, out, 20)
		g := a.Group(context.Background())
		for range 10 {
			g.Go(func(context.Context) error { in.enter(); defer in.leave(); time.Sleep(time.Millisecond); return nil })
		}
		assert.NoError(t, g.Wait())
		assert.Equal(t, int64(2), in.peak.Load(), "within a's limit")
		assert.Equal(t, uint64(31), a.Status().Completed)
		p.Stop()
	})
}

func TestSubpoolPanicsOnALimitBelowOne(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.PanicsWithValue(t, `workerpool: Subpool("x", 0): the limit must be at least 1`, func() { p.Subpool("x", 0) })
	s := p.Subpool("x", 1)
	assert.Equal(t, "x", s.Name())
	assert.Panics(t, func() { s.Resize(0) })
}

// Subpools lists the sub-pools not yet stopped, in the order they were
// made; one made after another was stopped is a sub-pool of its own, whose
// tasks count as its own.
func TestSubpoolsListsTheSubpoolsNotStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.StopWait()
		a, b := p.Subpool("a", 1), p.Subpool("b", 1)
		assert.Equal(t, []*workerpool.Subpool{a, b}, p.Subpools())
		a.StopWait()
		assert.Equal(t, []*workerpool.Subpool{b}, p.Subpools())
		c := p.Subpool("c", 1)
		assert.Equal(t, []*workerpool.Subpool{b, c}, p.Subpools())
		require.NoError(t, c.SubmitWait(func() {}))
		require.NoError(t, b.SubmitWait(func() {}))
		assert.Equal(t, uint64(1), b.Status().Completed)
		assert.Equal(t, uint64(1), c.Status().Completed, "c's task is c's, not b's")
	})
}
