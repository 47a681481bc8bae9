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
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests of a sub-pool's life: making one, its share of the pool's
// bound, and its Stop and StopWait, alone and with the pool's. Its limit is
// in subpool_limit_test.go.

func TestSubpoolPanicsOnALimitBelowOne(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.PanicsWithValue(t, `workerpool: Subpool("x", 0): the limit must be at least 1`, func() { p.Subpool("x", 0) })
	s := p.Subpool("x", 1)
	assert.Equal(t, "x", s.Name())
	assert.PanicsWithValue(t, "workerpool: Subpool.Resize(0): the limit must be at least 1", func() { s.Resize(0) })
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

// ---------------------------------------------------------------------------
// Stop and StopWait, the sub-pool's and the pool's.

func TestSubpoolStopDropsOnlyItsTasksAndWaitsForItsRunningOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		a, b := p.Subpool("a", 1), p.Subpool("b", 1)
		var ranA, ranB, ranP atomic.Int64
		require.NoError(t, a.Submit(func() { time.Sleep(time.Second); ranA.Add(1) }))
		var order []int
		for i := range 5 {
			require.NoError(t, a.Submit(func() { order = append(order, i) }))
		}
		require.NoError(t, a.SubmitKey("k", func() { order = append(order, 100) }))
		waitErr := make(chan error)
		go func() { waitErr <- a.SubmitWait(func() { t.Error("a dropped task ran") }) }()
		for range 3 {
			require.NoError(t, b.Submit(func() { time.Sleep(time.Second); ranB.Add(1) }))
			require.NoError(t, p.Submit(func() { ranP.Add(1) }))
		}
		synctest.Wait()

		start := time.Now()
		tasks := a.Stop()
		assert.Equal(t, time.Second, time.Since(start), "Stop waits for a's running task")
		assert.Equal(t, int64(1), ranA.Load())
		assert.ErrorIs(t, <-waitErr, workerpool.ErrStopped)
		require.Len(t, tasks, 6, "the fire-and-forget tasks a had waiting")
		for _, task := range tasks {
			task()
		}
		assert.Equal(t, []int{0, 1, 2, 3, 4, 100}, order, "each of a's queues in order")
		assert.ErrorIs(t, a.Submit(func() {}), workerpool.ErrStopped)
		assert.ErrorIs(t, a.SubmitKey("k", func() {}), workerpool.ErrStopped)
		assert.Nil(t, a.Stop(), "a later Stop gets nothing")

		assert.NoError(t, b.Submit(func() { ranB.Add(1) }), "b goes on")
		assert.NoError(t, p.Submit(func() { ranP.Add(1) }), "the pool goes on")
		p.StopWait()
		assert.Equal(t, int64(4), ranB.Load())
		assert.Equal(t, int64(4), ranP.Load())
		st := a.Status()
		assert.Equal(t, workerpool.Stopped, st.State)
		assert.Equal(t, uint64(7), st.Abandoned)
		assert.Equal(t, uint64(1), st.Completed)
		assert.Equal(t, uint64(7), p.Status().Abandoned)
	})
}

func TestSubpoolStopWaitRunsItsTasksAndLeavesThePoolRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		a := p.Subpool("a", 2)
		var ran atomic.Int64
		for range 10 {
			require.NoError(t, a.Submit(func() { time.Sleep(time.Second); ran.Add(1) }))
		}
		start := time.Now()
		a.StopWait()
		assert.Equal(t, 5*time.Second, time.Since(start), "ten tasks, two at a time")
		assert.Equal(t, int64(10), ran.Load())
		assert.ErrorIs(t, a.Submit(func() {}), workerpool.ErrStopped)
		assert.NoError(t, p.SubmitWait(func() {}))
		assert.Equal(t, workerpool.Running, p.Status().State)
		p.Stop()
	})
}

// TestASubpoolsStopEscalatesItsStopWait: a sub-pool's Stop during its
// StopWait drops the tasks left and both return once the running one ends.
func TestASubpoolsStopEscalatesItsStopWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		a := p.Subpool("a", 1)
		var ran atomic.Int64
		for range 5 {
			require.NoError(t, a.Submit(func() { time.Sleep(time.Second); ran.Add(1) }))
		}
		start := time.Now()
		waited := make(chan time.Duration)
		go func() { a.StopWait(); waited <- time.Since(start) }()
		time.Sleep(1500 * time.Millisecond) // the second task runs
		tasks := a.Stop()
		assert.Equal(t, 2*time.Second, time.Since(start), "Stop waits for the running task")
		assert.Equal(t, 2*time.Second, <-waited, "StopWait returns with it")
		assert.Len(t, tasks, 3, "the tasks left come back")
		assert.Equal(t, int64(2), ran.Load())
		assert.NoError(t, p.SubmitWait(func() {}), "the pool goes on")
		p.StopWait()
		assert.Equal(t, uint64(3), a.Status().Abandoned)
	})
}

// A12. Subpool.StopWait waiting on a paused pool, then Subpool.Stop from
// another sub-pool's task: Stop drops what is left (returning it, in
// acceptance order, keyed or not), StopWait returns too, both once the
// sub-pool's running task has ended, while the pool stays paused.
func TestSubpoolStopEscalatesStopWaitOnAPausedPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		defer p.Stop()
		sub := p.Subpool("s", 1)
		other := p.Subpool("o", 1)
		hold := make(chan struct{})
		sub.Submit(func() { <-hold })
		synctest.Wait()
		var order []int
		var mu sync.Mutex
		for i := range 4 {
			f := func() { mu.Lock(); order = append(order, i); mu.Unlock() }
			if i%2 == 0 {
				sub.SubmitKey(fmt.Sprint("k", i%3), f)
			} else {
				sub.Submit(f)
			}
		}
		// The stopper is queued on the other sub-pool before the pause.
		stopperIn := make(chan struct{})
		var dropped []func()
		stopDone := make(chan struct{})
		other.Submit(func() {
			close(stopperIn)
			<-stopperIn
			time.Sleep(time.Second)
			dropped = sub.Stop()
			close(stopDone)
		})
		synctest.Wait()
		pctx, unpause := context.WithCancel(context.Background())
		defer unpause()
		pauseDone := make(chan struct{})
		go func() { p.Pause(pctx); close(pauseDone) }()
		swDone := make(chan struct{})
		go func() { sub.StopWait(); close(swDone) }()
		synctest.Wait()
		time.Sleep(2 * time.Second) // the stopper calls Stop
		synctest.Wait()
		select {
		case <-stopDone:
			t.Error("Subpool.Stop returned while its task still runs")
		default:
		}
		close(hold)
		synctest.Wait()
		select {
		case <-stopDone:
		default:
			t.Fatal("Subpool.Stop did not return once its task ended")
		}
		select {
		case <-swDone:
		default:
			t.Error("Subpool.StopWait did not return after Stop dropped the rest")
		}
		if len(dropped) != 4 {
			t.Fatalf("Stop returned %d tasks, want 4", len(dropped))
		}
		for _, f := range dropped {
			f()
		}
		if fmt.Sprint(order) != "[0 1 2 3]" {
			t.Errorf("dropped tasks in order %v", order)
		}
		if ss := sub.Status(); ss.State != workerpool.Stopped || !balanced(ss) || ss.Abandoned != 4 {
			t.Errorf("sub-pool: %v %s", ss.State, fmtStatus(ss))
		}
		if s := p.Status(); s.State != workerpool.Paused {
			t.Errorf("pool state %v, want paused", s.State)
		}
	})
}

// An idle sub-pool's Stop returns at once, while the pool's StopWait waits
// for a long task of the pool's own queue.
func TestAnIdleSubpoolsStopWaitsForNoOtherQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		s := p.Subpool("s", 1)
		require.NoError(t, p.Submit(func() { time.Sleep(time.Hour) }))
		waited := make(chan struct{})
		go func() { p.StopWait(); close(waited) }()
		synctest.Wait()
		start := time.Now()
		assert.Empty(t, s.Stop())
		assert.Zero(t, time.Since(start), "Stop waited for the pool's own task")
		s2 := p.Subpool("s2", 1)
		s2.StopWait()
		assert.Zero(t, time.Since(start), "StopWait waited for the pool's own task")
		<-waited
		assert.Equal(t, time.Hour, time.Since(start))
	})
}

// A pool's task may stop an idle sub-pool after the pool's StopWait has
// emptied the queue: the sub-pool's Stop waits for its own tasks only, not
// for the pool to finish, which waits for the calling task.
func TestAPoolTaskCanStopAnIdleSubpoolWhileThePoolStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		s := p.Subpool("s", 1)
		proceed := make(chan struct{})
		stopped := make(chan []func())
		require.NoError(t, p.Submit(func() {
			<-proceed
			stopped <- s.Stop()
		}))
		waited := make(chan struct{})
		go func() { p.StopWait(); close(waited) }()
		synctest.Wait() // StopWait has emptied the queue: the loop is done
		close(proceed)
		assert.Empty(t, <-stopped)
		<-waited
	})
}

// A6. A pool task (or another sub-pool's task) stops a busy sub-pool,
// with running and waiting tasks, while the pool's Stop, StopWait or
// Shutdown runs and another sub-pool's task runs on: Subpool.Stop or
// StopWait returns once its own tasks have ended, whatever the rest does.
func TestBusySubpoolStoppedFromATaskWhileThePoolStops(t *testing.T) {
	for _, poolStop := range []string{"StopWait", "Stop", "Shutdown", "none"} {
		for _, subStop := range []string{"Stop", "StopWait"} {
			for _, from := range []string{"pool", "otherSub"} {
				name := fmt.Sprintf("pool.%s/sub.%s/from=%s", poolStop, subStop, from)
				t.Run(name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						p := workerpool.New(4)
						subA := p.Subpool("A", 1)
						subB := p.Subpool("B", 2)
						holdA, holdX := make(chan struct{}), make(chan struct{})
						var runningA atomic.Int32
						var ranA atomic.Int32
						for range 3 {
							subA.Submit(func() {
								runningA.Add(1)
								defer runningA.Add(-1)
								ranA.Add(1)
								<-holdA
							})
						}
						subB.Submit(func() { <-holdX }) // the rest of the pool: runs on and on
						synctest.Wait()
						stopReturned := make(chan int32, 1)
						stopper := func() {
							if subStop == "Stop" {
								subA.Stop()
							} else {
								subA.StopWait()
							}
							stopReturned <- runningA.Load()
						}
						if from == "pool" {
							if err := p.Submit(stopper); err != nil {
								t.Fatal(err)
							}
						} else {
							if err := subB.Submit(stopper); err != nil {
								t.Fatal(err)
							}
						}
						synctest.Wait()
						poolDone := make(chan struct{})
						go func() {
							defer close(poolDone)
							switch poolStop {
							case "StopWait":
								p.StopWait()
							case "Stop":
								p.Stop()
							case "Shutdown":
								ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
								defer cancel()
								p.Shutdown(ctx)
							}
						}()
						synctest.Wait()
						if err := subA.Submit(func() {}); !errors.Is(err, workerpool.ErrStopped) {
							t.Errorf("submission to a stopping sub-pool: %v", err)
						}
						close(holdA) // the sub-pool's own tasks end; X runs on
						synctest.Wait()
						select {
						case n := <-stopReturned:
							if n != 0 {
								t.Errorf("Subpool.%s returned with %d of its tasks running", subStop, n)
							}
						default:
							t.Errorf("Subpool.%s has not returned though its tasks ended (ran %d); the other sub-pool's task still runs", subStop, ranA.Load())
						}
						if st := subA.Status(); st.State != workerpool.Stopped || st.Busy != 0 || st.Waiting != 0 || !balanced(st) {
							t.Errorf("sub-pool A: State=%v %s", st.State, fmtStatus(st))
						}
						close(holdX)
						synctest.Wait()
						<-poolDone
						p.Stop()
						if ps := p.Status(); !balanced(ps) {
							t.Errorf("pool at rest: %s", fmtStatus(ps))
						}
					})
				})
			}
		}
	}
}

// Submitters race a sub-pool's Stop on the real scheduler: every task
// accepted either runs once or comes back from Stop, none runs after Stop
// returned, and the pool and the other sub-pool go on.
func TestNothingIsLostWhenASubpoolsStopRacesSubmitters(t *testing.T) {
	for round := range 20 {
		p := workerpool.New(4)
		a, b := p.Subpool("a", 2), p.Subpool("b", 2)
		var ran, accepted, afterStop, waitsStopped atomic.Int64
		var stopped atomic.Bool
		task := func() {
			if stopped.Load() {
				afterStop.Add(1)
			}
			ran.Add(1)
		}
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				for j := 0; ; j++ {
					var err error
					switch j % 3 {
					case 0:
						err = a.Submit(task)
					case 1:
						err = a.SubmitKey(fmt.Sprint("k", i%2), task)
					default:
						err = a.SubmitWait(task)
						if errors.Is(err, workerpool.ErrStopped) {
							waitsStopped.Add(1) // refused, or dropped and not returned
						}
					}
					if errors.Is(err, workerpool.ErrStopped) {
						return
					}
					if !assert.NoError(t, err) { // not require: FailNow only on the test's goroutine
						return
					}
					accepted.Add(1)
					runtime.Gosched()
				}
			})
		}
		for range 100 {
			require.NoError(t, b.Submit(func() {}))
		}
		for accepted.Load() < 50 {
			runtime.Gosched() // stop mid-stream, not on a clock
		}
		returned := a.Stop()
		stopped.Store(true)
		wg.Wait()
		for _, f := range returned {
			f()
		}
		require.NoError(t, p.SubmitWait(func() {}), "the pool goes on")
		p.StopWait()
		assert.Equal(t, int64(len(returned)), afterStop.Load(), "round %d: no task ran after Stop returned, but those it returned", round)
		assert.Equal(t, accepted.Load(), ran.Load(), "round %d: every accepted task ran once, on a worker or from Stop", round)
		st := a.Status()
		dropped := int64(st.Abandoned) - int64(len(returned))
		assert.True(t, dropped >= 0 && dropped <= waitsStopped.Load(),
			"round %d: Abandoned %d: the %d tasks Stop returned and at most the %d SubmitWaits that got ErrStopped", round, st.Abandoned, len(returned), waitsStopped.Load())
		assert.Equal(t, st.Submitted, st.Completed+st.Abandoned, "round %d: %+v", round, st)
		assert.Equal(t, uint64(100), b.Status().Completed, "round %d: b went on", round)
	}
}

func TestThePoolsStopCoversEverySubpool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		a, b := p.Subpool("a", 1), p.Subpool("b", 1)
		release := hold(t, p, 1)
		var got []string
		for _, n := range []string{"p1", "p2"} {
			require.NoError(t, p.Submit(func() { got = append(got, n) }))
		}
		for _, n := range []string{"a1", "a2"} {
			require.NoError(t, a.Submit(func() { got = append(got, n) }))
		}
		require.NoError(t, b.SubmitKey("k", func() { got = append(got, "bk") }))
		synctest.Wait()
		stopped := make(chan []func())
		go func() { stopped <- p.Stop() }()
		synctest.Wait()
		release()
		tasks := <-stopped
		assert.Len(t, tasks, 5, "every queue's tasks come back")
		for _, task := range tasks {
			task()
		}
		assert.Subset(t, got, []string{"p1", "p2", "a1", "a2", "bk"})
		assert.Less(t, index(got, "p1"), index(got, "p2"), "each queue's in order")
		assert.Less(t, index(got, "a1"), index(got, "a2"))
		for _, s := range []*workerpool.Subpool{a, b} {
			assert.ErrorIs(t, s.Submit(func() {}), workerpool.ErrStopped)
			assert.ErrorIs(t, s.SubmitWait(func() {}), workerpool.ErrStopped)
		}
		assert.Nil(t, a.Stop(), "the pool's Stop dropped them already")
		a.StopWait()
		assert.Equal(t, uint64(5), p.Status().Abandoned)
	})
}

// TestThePoolsStopWaitAndShutdownCoverEverySubpool: StopWait runs every
// sub-pool's waiting tasks, keyed ones included; a Shutdown past its
// deadline drops them and returns them, each queue's in order. Either way
// the sub-pools refuse submissions afterwards and their Status is final.
func TestThePoolsStopWaitAndShutdownCoverEverySubpool(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stop      func(t *testing.T, p *workerpool.Pool) []func()
		abandoned uint64
	}{
		{"StopWait", func(_ *testing.T, p *workerpool.Pool) []func() { p.StopWait(); return nil }, 0},
		{"Shutdown past its deadline", func(t *testing.T, p *workerpool.Pool) []func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second/2)
			defer cancel()
			tasks, err := p.Shutdown(ctx)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			return tasks
		}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1)
				a, b := p.Subpool("a", 1), p.Subpool("b", 1)
				require.NoError(t, p.Submit(func() { time.Sleep(time.Second) })) // the one worker is busy
				var got []string
				note := func(n string) func() { return func() { got = append(got, n) } }
				require.NoError(t, a.Submit(note("a1")))
				require.NoError(t, a.Submit(note("a2")))
				require.NoError(t, a.SubmitKey("k", note("ak")))
				require.NoError(t, b.SubmitKey("k", note("bk1")))
				require.NoError(t, b.SubmitKey("k", note("bk2")))
				tasks := tc.stop(t, p)
				assert.Len(t, got, 5-int(tc.abandoned), "tasks that ran on workers")
				for _, task := range tasks {
					task()
				}
				assert.ElementsMatch(t, []string{"a1", "a2", "ak", "bk1", "bk2"}, got, "every task ran once, or came back")
				assert.Less(t, index(got, "a1"), index(got, "a2"), "each queue's in order")
				assert.Less(t, index(got, "bk1"), index(got, "bk2"))
				var abandoned uint64
				for _, s := range []*workerpool.Subpool{a, b} {
					assert.ErrorIs(t, s.Submit(func() {}), workerpool.ErrStopped)
					assert.ErrorIs(t, s.SubmitKey("k", func() {}), workerpool.ErrStopped)
					st := s.Status()
					assert.Equal(t, workerpool.Stopped, st.State)
					assert.Equal(t, st.Submitted, st.Completed+st.Abandoned, "%s at rest: %+v", s.Name(), st)
					abandoned += st.Abandoned
				}
				assert.Equal(t, tc.abandoned, abandoned)
				assert.Equal(t, tc.abandoned, p.Status().Abandoned)
			})
		})
	}
}

// When the pool's Stop cuts a sub-pool's task out of the hand-off buffer,
// the sub-pool's count of tasks out goes down with it: its StopWait returns
// once its running task ends, while the pool still waits for its own.
func TestASubpoolsTaskCutByThePoolsStopFreesItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		s := p.Subpool("s", 2)
		long := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-long }))
		short := make(chan struct{})
		require.NoError(t, s.Submit(func() { <-short }))
		require.NoError(t, s.Submit(func() { t.Error("a task Stop dropped ran") })) // in the hand-off buffer
		synctest.Wait()
		subDone := make(chan struct{})
		go func() { s.StopWait(); close(subDone) }()
		var dropped []func()
		poolDone := make(chan struct{})
		go func() { dropped = p.Stop(); close(poolDone) }()
		synctest.Wait()
		close(short)
		synctest.Wait()
		assert.True(t, isDone(subDone), "the sub-pool's StopWait returns once its own task ended")
		assert.False(t, isDone(poolDone), "the pool waits for its own task")
		close(long)
		<-poolDone
		assert.Len(t, dropped, 1)
		assert.Equal(t, uint64(1), s.Status().Abandoned)
	})
}

func TestASubpoolOfAStoppedPoolRefusesEverything(t *testing.T) {
	p := workerpool.New(1)
	p.Stop()
	s := p.Subpool("late", 1)
	assert.ErrorIs(t, s.Submit(func() {}), workerpool.ErrStopped)
	assert.ErrorIs(t, s.SubmitKey("k", func() {}), workerpool.ErrStopped)
	assert.ErrorIs(t, s.SubmitWait(func() {}), workerpool.ErrStopped)
	assert.ErrorIs(t, s.TrySubmit(func() {}), workerpool.ErrStopped)
	assert.ErrorIs(t, s.SubmitContext(context.Background(), func() {}), workerpool.ErrStopped)
	_, err := workerpool.Go(s, func() (int, error) { return 0, nil }).Wait()
	assert.ErrorIs(t, err, workerpool.ErrStopped)
	_, err = workerpool.Map(context.Background(), s, []int{1}, func(context.Context, int) (int, error) { return 0, nil })
	assert.ErrorIs(t, err, workerpool.ErrStopped)
	g := s.Group(context.Background())
	g.Go(func(context.Context) error { t.Error("a refused group task ran"); return nil })
	assert.ErrorIs(t, g.Wait(), workerpool.ErrStopped)
	assert.Nil(t, s.Stop())
	s.StopWait() // returns
	s.Resize(3)  // does nothing, and returns
	st := s.Status()
	assert.Zero(t, st.Submitted)
	assert.Zero(t, st.Busy)
}

// TestOnceASubpoolsStopReturnsNoneOfItsTasksWaits cancels a sub-pool's
// Group with a thousand tasks waiting behind its one running task and stops
// the sub-pool at once, on the real scheduler: once Stop has returned, its
// Status says Stopped, none of its tasks waits, and its counts balance,
// each task counted as run, dropped or given up. The dispatcher used to
// answer the Stop while give-ups were under way, their tasks still Waiting.
func TestOnceASubpoolsStopReturnsNoneOfItsTasksWaits(t *testing.T) {
	for round := range rounds(150) {
		p := workerpool.New(2)
		s := p.Subpool("s", 1)
		block := make(chan struct{})
		require.NoError(t, s.Submit(func() { <-block }))
		ctx, cancel := context.WithCancel(context.Background())
		g := s.Group(ctx)
		for range 1000 {
			g.Go(func(context.Context) error { return nil })
		}
		cancel() // the group gives its queued tasks up on its own
		close(block)
		s.Stop()
		st := s.Status()
		_ = g.Wait()
		p.Stop()
		if st.State != workerpool.Stopped || st.Waiting != 0 || !balanced(st) {
			t.Fatalf("round %d: once the sub-pool's Stop returned: State %v, %s", round, st.State, fmtStatus(st))
		}
	}
}

// TestOnceASubpoolsStopReturnsThePoolCountsItsTasksCompleted stops a
// sub-pool while its two keyed tasks end, on the real scheduler: Stop
// returns once they have ended, and then the pool's Status too counts them
// Completed, with no worker Busy. A worker that ran a keyed task reported
// the key's end, which the Stop waits for, before it counted the task
// done, so the pool could still show it Busy.
func TestOnceASubpoolsStopReturnsThePoolCountsItsTasksCompleted(t *testing.T) {
	for round := range rounds(10000) {
		p := workerpool.New(2)
		s := p.Subpool("s", 2)
		started := make(chan struct{}, 2)
		release := make(chan struct{})
		for i := range 2 {
			require.NoError(t, s.SubmitKey(fmt.Sprint(i), func() { started <- struct{}{}; <-release }))
		}
		<-started
		<-started
		go close(release)
		s.Stop()
		st := p.Status()
		p.Stop()
		if st.Busy != 0 || st.Completed != 2 {
			t.Fatalf("round %d: once the sub-pool's Stop returned, the pool shows %s", round, fmtStatus(st))
		}
	}
}

// A sub-pool's SubmitCtx and Group with a nil context panic at once with a
// message that names the method; the sub-pool accepts nothing.
func TestSubpoolSubmitContextAndGroupWithANilContextPanicNamingThem(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	s := p.Subpool("s", 1)
	for _, tc := range []struct {
		name, want string
		misuse     func()
	}{
		{"SubmitContext", "workerpool: Subpool.SubmitContext: nil context", func() {
			_ = s.SubmitContext(nil, func() {}) //nolint:staticcheck // the nil context is the point
		}},
		{"Group", "workerpool: Subpool.Group: nil context", func() {
			s.Group(nil) //nolint:staticcheck // the nil context is the point
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want, tc.misuse)
		})
	}
	assert.Zero(t, s.Status().Submitted)
}

// TestAStoppedSubpoolIsFreed makes ten thousand sub-pools of one pool, one
// after another, gives each two tasks and a keyed one, stops it (StopWait
// or Stop) and drops it: the heap must not grow with them, and the
// sub-pools must be collected. The Pool.Subpool doc: "a sub-pool with no
// task waiting costs the pool nothing". The dispatcher used to keep every
// sub-pool whose tasks it had seen in a table by number: 1,400 bytes a
// stopped sub-pool, and all of them reachable.
func TestAStoppedSubpoolIsFreed(t *testing.T) {
	n := 10_000
	if raceEnabled {
		n = 2_000
	}
	p := workerpool.New(4)
	defer p.StopWait()
	task := func() {}
	for range 100 { // warm: workers, key lines, the reports' list
		s := p.Subpool("warm", 2)
		require.NoError(t, s.SubmitKey("k", task))
		s.StopWait()
	}
	before := liveHeap()
	var sample []weak.Pointer[workerpool.Subpool]
	for i := range n {
		s := p.Subpool(fmt.Sprint("s", i), 2)
		if i%100 == 0 {
			sample = append(sample, weak.Make(s))
		}
		require.NoError(t, s.Submit(task))
		require.NoError(t, s.Submit(task))
		require.NoError(t, s.SubmitKey("k", task))
		if i%2 == 0 {
			s.StopWait()
		} else {
			s.Stop()
		}
	}
	grew := int64(liveHeap()) - int64(before)
	kept := 0
	for _, w := range sample {
		if w.Value() != nil {
			kept++
		}
	}
	t.Logf("the heap grew by %d B over %d stopped sub-pools (%.1f B each); %d of %d sampled are reachable",
		grew, n, float64(grew)/float64(n), kept, len(sample))
	assert.Zero(t, kept, "a stopped sub-pool, dropped by its user, can be collected")
	assert.LessOrEqual(t, grew, int64(64<<10), "stopped sub-pools leave nothing behind")
	assert.Empty(t, p.Subpools(), "no sub-pool is listed once stopped")
}

// TestASubpoolsStopReturnsWhenItsOwnTaskStopsThePool: a task of the
// sub-pool waits in the pool's StopWait, with another of its tasks queued
// behind it (stranded: dropped). The sub-pool's Stop or StopWait, called
// from outside before or after, returns once the pool has stopped and
// that task has ended too. The review saw both wait for ever in 3 of 3
// runs: the loop, gone by then, was to answer them.
func TestASubpoolsStopReturnsWhenItsOwnTaskStopsThePool(t *testing.T) {
	for _, kind := range []string{"StopWait", "Stop", "StopWait after"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2)
				s := p.Subpool("s", 1)
				gate, stopped := make(chan struct{}), make(chan struct{})
				var ended atomic.Bool
				require.NoError(t, s.Submit(func() {
					<-gate
					p.StopWait()
					close(stopped)
					time.Sleep(time.Second) // the rest of the task
					ended.Store(true)
				}))
				require.NoError(t, s.Submit(func() {}))
				synctest.Wait()
				subDone := make(chan struct{})
				stopSub := func() {
					defer close(subDone)
					if kind == "Stop" {
						assert.Len(t, s.Stop(), 1, "it drops its queued task")
					} else {
						s.StopWait()
					}
					assert.True(t, ended.Load(), "the sub-pool's stop returned before its task ended")
					assert.Equal(t, workerpool.Stopped, s.Status().State)
				}
				if kind != "StopWait after" {
					go stopSub()
					synctest.Wait()
				}
				close(gate)
				<-stopped
				if kind == "StopWait after" {
					go stopSub()
				}
				<-subDone // (synctest reports a deadlock if it never comes)
				p.StopWait()
			})
		})
	}
}

// TestASubpoolsStopWaitsForItsOwnTasksBesideThePoolsStoppers: a task of
// sub-pool s waits in the pool's StopWait (a stopper) and goes on for a
// second after it returns. A sub-pool's Stop or StopWait, from a task of
// the pool's own queue or of another sub-pool, or from another stopper,
// called before or after the stopper's, returns once that task has ended: the pool's stop does not
// wait for the worker that waits so. Called after the pool has stopped on
// another sub-pool, idle, it returns at once. A second review saw the
// first hang, the second return early and the third wait for the unrelated
// stopper, each in 3 of 3 runs.
func TestASubpoolsStopWaitsForItsOwnTasksBesideThePoolsStoppers(t *testing.T) {
	for _, order := range []string{"stopper first", "sub-pool's stop first"} {
		for _, kind := range []string{"StopWait", "Stop"} {
			for _, from := range []string{"the pool's own queue", "another sub-pool", "a stopper"} {
				t.Run(order+"/"+kind+"/"+from, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						p := workerpool.New(3)
						s, o := p.Subpool("s", 1), p.Subpool("o", 1)
						gateA, gateB, subDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
						var ended atomic.Bool
						require.NoError(t, s.Submit(func() {
							<-gateA
							p.StopWait()
							time.Sleep(time.Second)
							ended.Store(true)
						}))
						stopSub := func() {
							<-gateB
							if from == "a stopper" {
								p.StopWait()
							}
							if kind == "Stop" {
								s.Stop()
							} else {
								s.StopWait()
							}
							assert.True(t, ended.Load(), "the sub-pool's %s returned before its task ended", kind)
							close(subDone)
						}
						if from != "the pool's own queue" {
							require.NoError(t, o.Submit(stopSub))
						} else {
							require.NoError(t, p.Submit(stopSub))
						}
						synctest.Wait()
						first, second := gateA, gateB
						if order != "stopper first" {
							first, second = gateB, gateA
						}
						close(first)
						synctest.Wait()
						close(second)
						<-subDone // (synctest reports a deadlock if it never comes)
						p.StopWait()
						assert.Zero(t, p.Status().Workers)
					})
				})
			}
		}
	}
	t.Run("an idle sub-pool, after the pool stopped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(2)
			s := p.Subpool("s", 1)
			require.NoError(t, s.SubmitWait(func() {}))
			gate := make(chan struct{})
			require.NoError(t, p.Submit(func() { <-gate; p.StopWait(); time.Sleep(time.Second) }))
			synctest.Wait()
			close(gate)
			synctest.Wait() // the pool has stopped; its stopper sleeps on
			start := time.Now()
			s.StopWait()
			assert.Zero(t, time.Since(start), "waited for another queue's stopper")
			p.StopWait()
		})
	})
}

// TestAStrandedQueueIsDroppedBesideWorkersInASubpoolsStop: Y, a task of
// s3, waits in the pool's StopWait; X waits in s3's Stop or StopWait, for
// Y; Q is queued behind X (on X's sub-pool of limit 1, or X's key), or
// behind another stopper of s0 while X waits for s0. X can end only once
// Y has, and Y only once the pool has stopped. X and the stopper lend
// their sub-pools' places, so Q runs in them (unless s0's Stop, called
// first, dropped it); but behind X's key Q is stranded, and dropped.
// Either way an outside StopWait returns. A third
// review saw it hang in 22 of 22 shapes: the loop counted X as a task that
// could end.
func TestAStrandedQueueIsDroppedBesideWorkersInASubpoolsStop(t *testing.T) {
	for _, holder := range []string{"X's place", "X's key", "another stopper"} {
		for _, kind := range []string{"Stop", "StopWait"} {
			for _, order := range []string{"X first", "Y first"} {
				t.Run(holder+"/"+kind+"/"+order, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						p := workerpool.New(4)
						s0, s3 := p.Subpool("s0", 1), p.Subpool("s3", 1)
						gateY, gateX := make(chan struct{}), make(chan struct{})
						require.NoError(t, s3.Submit(func() { <-gateY; p.StopWait() }))
						target := s3
						x := func() {
							<-gateX
							if kind == "Stop" {
								target.Stop()
							} else {
								target.StopWait()
							}
						}
						var qRan atomic.Bool
						q := func() { qRan.Store(true) }
						switch holder {
						case "X's place":
							require.NoError(t, s0.Submit(x))
							require.NoError(t, s0.Submit(q))
						case "X's key":
							require.NoError(t, p.SubmitKey("k", x))
							require.NoError(t, p.SubmitKey("k", q))
						default:
							target = s0
							require.NoError(t, s0.Submit(func() { <-gateY; p.StopWait() }))
							require.NoError(t, s0.Submit(q))
							require.NoError(t, p.Submit(x))
						}
						synctest.Wait()
						first, second := gateX, gateY
						if order == "Y first" {
							first, second = gateY, gateX
						}
						close(first)
						synctest.Wait()
						close(second)
						p.StopWait() // (synctest reports a deadlock if it never returns)
						st := p.Status()
						switch {
						case holder == "X's key":
							assert.False(t, qRan.Load(), "the stranded task ran")
							assert.Equal(t, uint64(1), st.Abandoned)
						case holder == "another stopper" && kind == "Stop" && order == "X first":
							assert.False(t, qRan.Load(), "s0's Stop came first, and dropped Q")
							assert.Equal(t, uint64(1), st.Abandoned)
						default:
							assert.True(t, qRan.Load(), "the task behind a lent place ran in it")
							assert.Zero(t, st.Abandoned)
						}
						assertBalanced(t, st)
						assert.Zero(t, st.Workers)
					})
				})
			}
		}
	}
}

// TestASubpoolIsFoundByItsName: Subpool with the name of a sub-pool that
// is not stopping returns that one, whatever limit it is given, so that
// two sub-pools running at once never share a name; once it is stopping,
// the name makes a new one. Issue 36: "acme" twice ran 4 at once.
func TestASubpoolIsFoundByItsName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		defer p.Stop()
		a := p.Subpool("acme", 2)
		assert.Same(t, a, p.Subpool("acme", 2), "the same tenant's sub-pool")
		assert.Same(t, a, p.Subpool("acme", 5), "the limit applies only to a sub-pool Subpool makes")
		assert.Equal(t, 2, a.Status().MaxWorkers)
		assert.NotSame(t, a, p.Subpool("other", 2))

		var c peakCounter
		for range 6 {
			require.NoError(t, p.Subpool("acme", 2).Submit(func() { c.enter(); time.Sleep(time.Second); c.leave() }))
		}
		synctest.Wait()
		time.Sleep(10 * time.Second)
		assert.Equal(t, int64(2), c.peak.Load(), "one limit for the name")

		a.Stop()
		b := p.Subpool("acme", 3)
		assert.NotSame(t, a, b, "a stopped sub-pool's name makes a new one")
		assert.Equal(t, 3, b.Status().MaxWorkers)
		assert.ErrorIs(t, a.Submit(func() {}), workerpool.ErrStopped)
		assert.NoError(t, b.Submit(func() {}))
	})
}

// TestAStoppedSubpoolsErrorNamesItAndWrapsErrStopped: a submission to a
// stopped sub-pool of a running pool says which sub-pool, and is
// ErrStopped to errors.Is; on a stopped pool it is ErrStopped itself.
func TestAStoppedSubpoolsErrorNamesItAndWrapsErrStopped(t *testing.T) {
	p := workerpool.New(2)
	s := p.Subpool("mail", 1)
	s.Stop()
	err := s.Submit(func() {})
	require.ErrorIs(t, err, workerpool.ErrStopped)
	assert.Equal(t, `workerpool: sub-pool "mail" is stopped`, err.Error())
	assert.ErrorIs(t, s.SubmitKey("k", func() {}), workerpool.ErrStopped)
	_, err = workerpool.Call(context.Background(), s, func(context.Context) (int, error) { return 1, nil })
	assert.ErrorIs(t, err, workerpool.ErrStopped)
	p.Stop()
	assert.Equal(t, workerpool.ErrStopped, p.Subpool("late", 1).Submit(func() {}), "a stopped pool's own error")
}

// TestEveryStoppedSubpoolIsFreedTheLastOnesIncluded: nothing of the pool
// keeps a sub-pool it stopped, not even the last ones, whose tasks its
// workers and its outbox held last, with no task after them: a worker that
// waits keeps nothing of its last task, and the loop nothing of the last
// queue its outbox held.
func TestEveryStoppedSubpoolIsFreedTheLastOnesIncluded(t *testing.T) {
	for _, how := range []string{"one task at a time", "through the outbox", "keyed"} {
		t.Run(how, func(t *testing.T) {
			p := workerpool.New(4, workerpool.WithMinWorkers(4))
			defer p.StopWait()
			var subs []weak.Pointer[workerpool.Subpool]
			for i := range 300 {
				s := p.Subpool(fmt.Sprint("s", i), 2)
				subs = append(subs, weak.Make(s))
				switch how {
				case "one task at a time":
					for range 3 {
						require.NoError(t, s.SubmitWait(func() {}))
					}
				case "through the outbox":
					gate := make(chan struct{})
					for range 4 {
						require.NoError(t, p.Submit(func() { <-gate }))
					}
					for range 10 {
						require.NoError(t, s.Submit(func() {}))
					}
					close(gate)
				case "keyed":
					for range 3 {
						require.NoError(t, s.SubmitKey("k", func() {}))
					}
				}
				s.StopWait()
			}
			runtime.GC()
			runtime.GC()
			var kept []int
			for i, w := range subs {
				if w.Value() != nil {
					kept = append(kept, i)
				}
			}
			assert.Empty(t, kept, "these stopped sub-pools are still reachable from the pool")
		})
	}
}

// TestAWaiterASubpoolsStopDroppedGetsItsNamedError: a SubmitWait, a Call
// and a Future queued in a sub-pool that its Stop drops learn that the
// sub-pool stopped, by name, and errors.Is finds ErrStopped; the pool goes
// on. (A review of issue 36 found them told "pool is stopped" while the
// pool ran.)
func TestAWaiterASubpoolsStopDroppedGetsItsNamedError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		s := p.Subpool("q-9", 1)
		release := make(chan struct{})
		require.NoError(t, s.Submit(func() { <-release })) // the others wait behind it
		synctest.Wait()
		errs := make(chan error, 3)
		go func() { errs <- s.SubmitWait(func() {}) }()
		go func() {
			_, err := workerpool.Call(context.Background(), s, func(context.Context) (int, error) { return 0, nil })
			errs <- err
		}()
		go func() {
			_, err := workerpool.Go(s, func() (int, error) { return 0, nil }).Wait()
			errs <- err
		}()
		synctest.Wait()
		go func() { synctest.Wait(); close(release) }()
		s.Stop()
		for range 3 {
			err := <-errs
			assert.ErrorIs(t, err, workerpool.ErrStopped)
			assert.ErrorContains(t, err, `sub-pool "q-9" is stopped`, "the sub-pool's own error, as its Submit gives")
		}
		assert.NoError(t, p.SubmitWait(func() {}), "the pool goes on")
	})
}

// TestASubpoolsTaskThatStoppedThePoolCanStopItsSubpool: a task of a
// sub-pool stops the pool (Stop, StopWait or Shutdown, which return with
// the task still running), then its own sub-pool (Stop or StopWait): the
// sub-pool's stop does not wait for the task that calls it, as its doc
// says, so it returns, and so does a StopWait from outside. A review found
// it waiting for itself for ever once the pool had stopped.
func TestASubpoolsTaskThatStoppedThePoolCanStopItsSubpool(t *testing.T) {
	for _, first := range stopFromInside {
		for _, then := range []string{"Stop", "StopWait"} {
			t.Run(first.name+"/"+then, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := workerpool.New(1)
					s := p.Subpool("S", 1)
					returned := make(chan struct{})
					require.NoError(t, s.Submit(func() {
						_, err := first.stop(p)
						assert.NoError(t, err)
						if then == "Stop" {
							s.Stop()
						} else {
							s.StopWait()
						}
						close(returned)
					}))
					select {
					case <-returned:
					case <-time.After(time.Hour):
						t.Fatalf("guarantees.md 3 and Subpool.Stop's doc: an hour on, the sub-pool's %s still waits for the task that calls it: %v", then, s.Status())
					}
					p.StopWait()
					synctest.Wait()
					assert.Equal(t, workerpool.Stopped, s.Status().State)
					assertBalanced(t, p.Status())
				})
			})
		}
	}
}
