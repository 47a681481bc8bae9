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

	"github.com/dispatchkit/workerpool"
)

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
					err = s.SubmitCtx(ctx, fn)
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
