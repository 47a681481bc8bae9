package workerpool_test

import (
	"context"
	"fmt"
	"log"
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

// On the fake clock, each task's wait (accepted to started) and run
// (started to ended) are exact: the sums, counts, maxima and buckets in
// Status, the pool's and the sub-pool's, add up to them.
func TestStatusSumsUpHowLongTasksWaitedAndRan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithTaskTimings())
		s := p.Subpool("s", 1)
		sleep := func(d time.Duration) func() { return func() { time.Sleep(d) } }
		require.NoError(t, p.Submit(sleep(2*time.Second)))       // waits 0, runs 2s
		require.NoError(t, s.Submit(sleep(3*time.Second)))       // waits 2s, runs 3s
		require.NoError(t, p.Submit(sleep(10*time.Millisecond))) // waits 5s, runs 10ms
		p.StopWait()

		st := p.Status()
		assert.Equal(t, uint64(3), st.Wait.Count)
		assert.Equal(t, 7*time.Second, st.Wait.Total)
		assert.Equal(t, 5*time.Second, st.Wait.Max)
		assert.Equal(t, uint64(3), st.Run.Count)
		assert.Equal(t, 5*time.Second+10*time.Millisecond, st.Run.Total)
		assert.Equal(t, 3*time.Second, st.Run.Max)
		assert.Equal(t, uint64(1), st.Wait.Buckets[0], "a wait of 0 is in the first bucket")
		assert.Equal(t, uint64(1), st.Run.Buckets[bucketOf(10*time.Millisecond)])
		var n uint64
		for _, c := range st.Run.Buckets {
			n += c
		}
		assert.Equal(t, st.Run.Count, n, "every run in one bucket")

		sub := s.Status()
		assert.Equal(t, workerpool.Timing{Count: 1, Total: 2 * time.Second, Max: 2 * time.Second, Buckets: bucket(2 * time.Second)}, sub.Wait)
		assert.Equal(t, workerpool.Timing{Count: 1, Total: 3 * time.Second, Max: 3 * time.Second, Buckets: bucket(3 * time.Second)}, sub.Run)
	})
}

// bucketOf returns the index of d's bucket in a Timing.
func bucketOf(d time.Duration) int {
	for i, b := range workerpool.TimingBounds {
		if d <= b {
			return i
		}
	}
	return len(workerpool.TimingBounds)
}

// bucket returns buckets holding d alone.
func bucket(d time.Duration) (b [len(workerpool.TimingBounds) + 1]uint64) {
	b[bucketOf(d)] = 1
	return b
}

func TestWithoutTaskTimingsStatusHasNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		p.StopWait()
		st := p.Status()
		assert.Zero(t, st.Wait)
		assert.Zero(t, st.Run)
	})
}

// The observer gets every task's timing, on the goroutine that ran it,
// before the task's waiter learns it ended.
func TestTheObserverGetsEveryTasksTimingBeforeItsWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []workerpool.TaskTiming
		p := workerpool.New(2, workerpool.WithTaskObserver(func(tt workerpool.TaskTiming) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, tt)
		}))
		s := p.Subpool("s", 2)
		require.NoError(t, s.SubmitWait(func() { time.Sleep(time.Second) }))
		mu.Lock()
		require.Len(t, seen, 1, "the observer ran before SubmitWait returned")
		assert.Equal(t, workerpool.TaskTiming{Subpool: s, Run: time.Second}, seen[0])
		mu.Unlock()
		assert.Error(t, p.SubmitWait(func() { panic("boom") }))
		p.StopWait()
		require.Len(t, seen, 2)
		assert.True(t, seen[1].Panicked)
		assert.Nil(t, seen[1].Subpool)
		assert.Equal(t, uint64(2), p.Status().Run.Count, "the observer implies timings")
	})
}

func ExampleWithTaskTimings() {
	p := workerpool.New(2, workerpool.WithTaskTimings())
	for range 10 {
		if err := p.Submit(func() { time.Sleep(time.Millisecond) }); err != nil {
			log.Fatal(err)
		}
	}
	p.StopWait()

	// Status sums up how long tasks waited and ran: a count, a total, a
	// maximum, and buckets for a histogram (see TimingBounds).
	s := p.Status()
	fmt.Println("timed:", s.Wait.Count, "waits,", s.Run.Count, "runs")
	fmt.Println("ran 1ms or more each:", s.Run.Total >= 10*time.Millisecond)
	// Output:
	// timed: 10 waits, 10 runs
	// ran 1ms or more each: true
}

// ---------------------------------------------------------------------------
// Timings on the fake clock, of every kind of task.

type measured struct {
	name       string
	sub        bool
	submitted  time.Time
	start, end time.Time
	panicked   bool
	known      bool // submitted is when the pool accepted it
}

func timingOf(ds []time.Duration) workerpool.Timing {
	var t workerpool.Timing
	for _, d := range ds {
		t.Count++
		t.Total += d
		t.Max = max(t.Max, d)
		t.Buckets[bucketOf(d)]++
	}
	return t
}

// Every kind of task, with distinct run times, on a pool and a sub-pool,
// under CallerRuns, with keys, a Pause taking the hand-off buffer back, a
// Call, a Future, a Map, a panic, a Goexit, a SubmitWait: each task's Wait
// and Run as the observer and Status give them must be exactly what the
// task saw on the fake clock.
func TestTimingsAreExactForEveryKindOfTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var observed []workerpool.TaskTiming
		p := workerpool.New(2, workerpool.WithMaxWaiting(4), workerpool.WithOverflow(workerpool.CallerRuns),
			workerpool.WithPanicHandler(func(*workerpool.PanicError) {}),
			workerpool.WithTaskObserver(func(tt workerpool.TaskTiming) {
				mu.Lock()
				observed = append(observed, tt)
				mu.Unlock()
			}))
		s := p.Subpool("s", 1)
		var all []*measured
		track := func(name string, sub bool, run time.Duration, how func(*measured)) *measured {
			m := &measured{name: name, sub: sub, known: true}
			mu.Lock()
			all = append(all, m)
			mu.Unlock()
			return m
		}
		body := func(m *measured, run time.Duration) func() {
			return func() {
				m.start = time.Now()
				time.Sleep(run)
				m.end = time.Now()
			}
		}
		observedFor := func(run time.Duration) bool {
			mu.Lock()
			defer mu.Unlock()
			for _, o := range observed {
				if o.Run == run {
					return true
				}
			}
			return false
		}
		var wg sync.WaitGroup
		submit := func(name string, sub bool, run time.Duration, do func(fn func()) error) {
			m := track(name, sub, run, nil)
			m.submitted = time.Now()
			if err := do(body(m, run)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		// t=0: two run, four wait (the bound), in the hand-off buffer and queue.
		submit("A", false, 100*time.Millisecond, p.Submit)
		submit("B", false, 201*time.Millisecond, p.Submit)
		submit("C key k", false, 302*time.Millisecond, func(f func()) error { return p.SubmitKey("k", f) })
		submit("D key k", false, 303*time.Millisecond, func(f func()) error { return p.SubmitKey("k", f) })
		submit("E sub", true, 404*time.Millisecond, s.Submit)
		wg.Go(func() {
			m := track("F Call sub", true, 0, nil)
			m.submitted = time.Now()
			_, err := workerpool.Call(context.Background(), s, func(context.Context) (int, error) {
				body(m, 405*time.Millisecond)()
				return 0, nil
			})
			if err != nil {
				t.Error(err)
			}
			if !observedFor(405 * time.Millisecond) {
				t.Error("Call returned before the observer was called for its task")
			}
		})
		synctest.Wait()
		// t=10ms: the queue is full: CallerRuns runs it in the submitter.
		time.Sleep(10 * time.Millisecond)
		wg.Go(func() { submit("G caller-runs", false, 56*time.Millisecond, p.Submit) })
		synctest.Wait()
		// t=20ms: a Pause takes the hand-off buffer back until t=520ms.
		time.Sleep(10 * time.Millisecond)
		pctx, pcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer pcancel()
		p.Pause(pctx) // returns once A and B have ended
		<-pctx.Done()
		synctest.Wait()
		// Later: a SubmitWait, a Future, a panic, a Goexit, a Map.
		time.Sleep(2 * time.Second) // everything above has ended
		wg.Go(func() {
			submit("H SubmitWait", false, 507*time.Millisecond, p.SubmitWait)
			if !observedFor(507 * time.Millisecond) {
				t.Error("SubmitWait returned before the observer was called for its task")
			}
		})
		wg.Go(func() {
			m := track("I Future", false, 0, nil)
			m.submitted = time.Now()
			_, _ = workerpool.Go(p, func() (int, error) { body(m, 508*time.Millisecond)(); return 0, nil }).Wait()
		})
		synctest.Wait()
		{
			m := track("J panic", false, 0, nil)
			m.submitted = time.Now()
			m.panicked = true
			_ = p.Submit(func() { body(m, 609*time.Millisecond)(); panic("j") })
		}
		{
			m := track("K goexit", false, 0, nil)
			m.submitted = time.Now()
			_ = p.Submit(func() { body(m, 610*time.Millisecond)(); runtime.Goexit() })
		}
		{
			ms := []*measured{track("L map 0", false, 0, nil), track("L map 1", false, 0, nil)}
			for _, m := range ms {
				m.submitted = time.Now()
			}
			wg.Go(func() {
				_, err := workerpool.Map(context.Background(), p, []int{0, 1}, func(_ context.Context, i int) (int, error) {
					body(ms[i], time.Duration(711+i)*time.Millisecond)()
					return i, nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		p.StopWait()

		var waits, runs, subWaits, subRuns []time.Duration
		for _, m := range all {
			if m.start.IsZero() {
				t.Errorf("%s never started", m.name)
				continue
			}
			w, r := m.start.Sub(m.submitted), m.end.Sub(m.start)
			waits, runs = append(waits, w), append(runs, r)
			if m.sub {
				subWaits, subRuns = append(subWaits, w), append(subRuns, r)
			}
			found := false
			for _, o := range observed {
				if o.Run == r {
					found = true
					if o.Wait != w || (o.Subpool != nil) != m.sub || o.Panicked != m.panicked {
						t.Errorf("%s: observer saw %+v, the task saw wait %v run %v (sub %v, panicked %v)", m.name, o, w, r, m.sub, m.panicked)
					}
				}
			}
			if !found {
				t.Errorf("%s (wait %v run %v): no observer call", m.name, w, r)
			}
		}
		if len(observed) != len(all) {
			t.Errorf("observer called %d times for %d tasks", len(observed), len(all))
		}
		st, sst := p.Status(), s.Status()
		if want := timingOf(waits); st.Wait != want {
			t.Errorf("pool Wait:\n got %+v\nwant %+v", st.Wait, want)
		}
		if want := timingOf(runs); st.Run != want {
			t.Errorf("pool Run:\n got %+v\nwant %+v", st.Run, want)
		}
		if want := timingOf(subWaits); sst.Wait != want {
			t.Errorf("sub-pool Wait:\n got %+v\nwant %+v", sst.Wait, want)
		}
		if want := timingOf(subRuns); sst.Run != want {
			t.Errorf("sub-pool Run:\n got %+v\nwant %+v", sst.Run, want)
		}
		for _, m := range all {
			t.Logf("%-14s wait %-8v run %v", m.name, m.start.Sub(m.submitted), m.end.Sub(m.start))
		}
	})
}

// Sub-pool keyed tasks, a Subpool.Resize that takes the hand-off buffer
// back, a Call given up while it waits (never runs: never timed), a task cut
// by Stop (never timed): the timings count exactly the tasks that ran.
func TestTimingsSubpoolKeysResizeAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var observed []workerpool.TaskTiming
		p := workerpool.New(3, workerpool.WithTaskObserver(func(tt workerpool.TaskTiming) {
			mu.Lock()
			observed = append(observed, tt)
			mu.Unlock()
		}))
		s := p.Subpool("s", 1)
		sleep := func(d time.Duration) func() { return func() { time.Sleep(d) } }
		_ = s.SubmitKey("k", sleep(1000*time.Millisecond)) // wait 0, run 1s
		_ = s.SubmitKey("k", sleep(1001*time.Millisecond)) // key busy: wait 1s
		_ = s.Submit(sleep(1002 * time.Millisecond))       // limit 1: waits
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		var callRan atomic.Bool
		go func() {
			_, _ = workerpool.Call(ctx, s, func(context.Context) (int, error) { callRan.Store(true); return 0, nil })
		}()
		synctest.Wait()
		time.Sleep(200 * time.Millisecond)
		s.Resize(2) // t=0.2: the unkeyed task starts now (the key still busy)
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		// A task cut by Stop.
		block := make(chan struct{})
		for range 3 {
			_ = p.Submit(func() { <-block })
		}
		_ = p.Submit(func() { t.Error("a dropped task ran") })
		synctest.Wait()
		go func() { time.Sleep(time.Second); close(block) }()
		p.Stop()
		st, sst := p.Status(), s.Status()
		if callRan.Load() {
			t.Skip("the Call ran; not the case under test")
		}
		// Expected: key task 1: wait 0 run 1s; unkeyed: wait 0.2s run 1.002s;
		// the Call: given up at 0.5s, never ran; key task 2: wait 1s run 1.001s;
		// 3 blockers: wait 0, run 1s.
		wantSubWait := timingOf([]time.Duration{0, 200 * time.Millisecond, time.Second})
		wantSubRun := timingOf([]time.Duration{1000 * time.Millisecond, 1002 * time.Millisecond, 1001 * time.Millisecond})
		if sst.Wait != wantSubWait {
			t.Errorf("sub-pool Wait:\n got %+v\nwant %+v", sst.Wait, wantSubWait)
		}
		if sst.Run != wantSubRun {
			t.Errorf("sub-pool Run:\n got %+v\nwant %+v", sst.Run, wantSubRun)
		}
		if st.Wait.Count != 6 || st.Run.Count != 6 || len(observed) != 6 {
			t.Errorf("pool counted %d waits, %d runs, observer %d calls; want 6 (3 sub-pool tasks + 3 blockers)", st.Wait.Count, st.Run.Count, len(observed))
		}
		if st.Canceled != 1 || st.Abandoned != 1 {
			t.Errorf("Canceled %d Abandoned %d, want 1 and 1", st.Canceled, st.Abandoned)
		}
	})
}

// A Group task whose group's ctx is cancelled after a worker took it but
// before it began is skipped ("they never run, and Group.Skipped counts
// them"): Status counts it in Canceled, not Completed, and the observer
// reports no run for it. Many rounds, as the window is narrow.
func TestASkippedGroupTaskIsNeitherTimedNorCompleted(t *testing.T) {
	rounds := 500
	skippedButCompleted, skippedButObserved, skippedTotal := 0, 0, 0
	for range rounds {
		synctest.Test(t, func(*testing.T) {
			var observed atomic.Int32
			p := workerpool.New(1, workerpool.WithTaskObserver(func(workerpool.TaskTiming) { observed.Add(1) }))
			defer p.StopWait()
			ctx, cancel := context.WithCancel(context.Background())
			g := p.Group(ctx)
			var ran atomic.Bool
			g.Go(func(context.Context) error { ran.Store(true); return nil })
			cancel()
			_ = g.Wait()
			synctest.Wait()
			if ran.Load() || g.Skipped() != 1 {
				return
			}
			skippedTotal++
			s := p.Status()
			if s.Completed == 1 && s.Canceled == 0 {
				skippedButCompleted++
			}
			if observed.Load() == 1 {
				skippedButObserved++
			}
		})
	}
	t.Logf("rounds %d: skipped %d; of them counted Completed (not Canceled) %d, timed by the observer %d", rounds, skippedTotal, skippedButCompleted, skippedButObserved)
	if skippedButCompleted+skippedButObserved > 0 {
		t.Errorf("a Group task that never ran (skipped) was counted Completed in %d rounds and reported to the observer as run in %d rounds (of %d)", skippedButCompleted, skippedButObserved, rounds)
	}
}
