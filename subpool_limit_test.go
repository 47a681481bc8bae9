package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests of a sub-pool's limit: it never runs more than its limit, by
// any way of submitting and under every overflow policy, nor all tasks
// together more than the pool's maximum; raising it starts waiting tasks
// at once, unless the pool is paused.

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

// A5. Every way into a sub-pool (Submit, TrySubmit, SubmitCtx, SubmitKey,
// SubmitWait, Go, Call, CallWith, Group.Go, Group.TryGo, Map, Local.Submit)
// under every overflow policy, with a bounded queue, Calls cut short,
// panics and Goexit, while the pool is paused, resized and one sub-pool is
// stopped: no sub-pool ever runs more than its limit, the workers never
// more than the maximum, a stopped sub-pool's Stop returns with none of its
// tasks running, later submissions get ErrStopped, and all balances.
func TestSubpoolLimitsUnderEveryPathAndPolicy(t *testing.T) {
	for _, ov := range []workerpool.Overflow{workerpool.Block, workerpool.Reject, workerpool.CallerRuns} {
		for _, giveUps := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/giveups=%v", ov, giveUps), func(t *testing.T) {
				for round := range 6 {
					attackLimitsRound(t, ov, round, giveUps)
				}
			})
		}
	}
}

func attackLimitsRound(t *testing.T, ov workerpool.Overflow, round int, giveUps bool) {
	const maxW = 4
	p := workerpool.New(maxW, workerpool.WithMaxWaiting(3), workerpool.WithOverflow(ov),
		workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
	limits := []int{1, 2, 3}
	subs := make([]*workerpool.Subpool, len(limits))
	watch := make([]*peakCounter, len(limits))
	for i, l := range limits {
		subs[i] = p.Subpool(fmt.Sprint("s", i), l)
		watch[i] = new(peakCounter)
	}
	var all peakCounter
	local := workerpool.NewLocal(func() (int, error) { return 0, nil }, nil)
	body := func(i, k int) {
		watch[i].enter()
		all.enter()
		defer all.leave()
		defer watch[i].leave()
		// Without give-ups, Group and Map tasks neither panic nor Goexit:
		// a failure would cancel their context, and the queued ones would
		// be given up.
		if giveUps || (k%12 != 8 && k%12 != 9) {
			switch k % 13 {
			case 5:
				panic("boom")
			case 7:
				runtime.Goexit()
			}
		}
		if k%3 == 0 {
			time.Sleep(20 * time.Microsecond)
		}
		runtime.Gosched()
	}
	stopCh := make(chan struct{})
	var wg sync.WaitGroup
	var stoppedSub atomic.Bool
	var afterStop atomic.Int32 // submissions accepted by sub 0 after its Stop returned
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stopCh:
					return
				default:
				}
				i := (g + k) % len(subs)
				s := subs[i]
				was := stoppedSub.Load() && i == 0
				fn := func() { body(i, k) }
				var err error
				ctx, cancel := context.WithCancel(context.Background())
				if giveUps {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(k%4)*50*time.Microsecond)
				}
				op := k % 12
				if !giveUps && i == 0 && (op == 8 || op == 9) {
					// A stop that drops a Group's or Map's task fails the
					// group, which gives up its other tasks: no give-ups here.
					op = 0
				}
				switch op {
				case 0:
					err = s.Submit(fn)
				case 1:
					err = s.TrySubmit(fn)
				case 2:
					err = s.SubmitContext(ctx, fn)
				case 3:
					err = s.SubmitKey(fmt.Sprint(k%3), fn)
				case 4:
					err = s.SubmitWait(fn)
				case 5:
					_, err = workerpool.Go(s, func() (int, error) { fn(); return 0, nil }).Wait()
				case 6:
					_, err = workerpool.Call(ctx, s, func(context.Context) (int, error) { fn(); return 0, nil })
				case 7:
					_, err = workerpool.CallWith(ctx, s, local, func(context.Context, int) (int, error) { fn(); return 0, nil })
				case 8:
					gr := s.Group(ctx)
					gr.Go(func(context.Context) error { fn(); return nil })
					gr.TryGo(func(context.Context) error { fn(); return nil })
					err = gr.Wait()
				case 9:
					_, err = workerpool.Map(ctx, s, []int{1, 2, 3, 4}, func(context.Context, int) (int, error) { fn(); return 0, nil })
				case 10:
					err = local.Submit(s, func(int) { fn() })
				case 11:
					err = s.Submit(fn)
				}
				cancel()
				if was && err == nil {
					afterStop.Add(1)
				}
			}
		}()
	}
	// Control: pause, resize, then stop sub-pool 0.
	for j := range 30 {
		switch j % 5 {
		case 0:
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
			p.Pause(ctx)
			cancel()
		case 1:
			p.Resize(1 + j%maxW)
		case 2:
			p.Resize(maxW)
		}
		time.Sleep(100 * time.Microsecond)
	}
	sub0 := subs[0]
	sub0.Stop()
	if n := watch[0].now.Load(); n != 0 {
		t.Errorf("round %d: Subpool.Stop returned with %d of its tasks running", round, n)
	}
	stoppedSub.Store(true)
	if err := sub0.Submit(func() {}); !errors.Is(err, workerpool.ErrStopped) {
		t.Errorf("round %d: a submission after Subpool.Stop: %v", round, err)
	}
	time.Sleep(2 * time.Millisecond)
	close(stopCh)
	wg.Wait()
	p.StopWait()
	if n := afterStop.Load(); n != 0 {
		t.Errorf("round %d: %d submissions to the stopped sub-pool were accepted", round, n)
	}
	for i, w := range watch {
		if int(w.peak.Load()) > limits[i] {
			t.Errorf("round %d: sub-pool %d (limit %d) ran %d at once", round, i, limits[i], w.peak.Load())
		}
	}
	if ov != workerpool.CallerRuns && all.peak.Load() > maxW {
		t.Errorf("round %d: %d sub-pool tasks ran at once, maximum %d", round, all.peak.Load(), maxW)
	}
	ps := p.Status()
	if !balanced(ps) {
		t.Errorf("round %d: pool not balanced at rest: %s", round, fmtStatus(ps))
	}
	for i, s := range subs {
		if ss := s.Status(); !balanced(ss) {
			t.Errorf("round %d: sub-pool %d not balanced at rest: %s", round, i, fmtStatus(ss))
		}
	}
}
