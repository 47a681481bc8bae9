package workerpool_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

// AttackLocalClosePanicHandlerGoexit: a Local's close panics, and the panic
// handler calls runtime.Goexit (as t.Fatal does). Documented: "a panic in
// close goes to the panic handler"; the handler may call Goexit and "the pool
// keeps its full capacity either way". Promise: Stop returns, every state is
// closed exactly once, and every goroutine the pool started has exited.
// Real clock: Stop never returns here, so no bubble could end.
func TestLocalClosePanicHandlerGoexitOnStop(t *testing.T) {
	var closes atomic.Int32
	const giveUpAfter = 1000 // close stops panicking after this many calls, to end the loop
	local := workerpool.NewLocal(func() (int, error) { return 1, nil }, func(int) {
		if closes.Add(1) > giveUpAfter {
			return
		}
		panic("close failed")
	})
	p := workerpool.New(1, workerpool.WithPanicHandler(func(*workerpool.PanicError) { runtime.Goexit() }))
	if _, err := workerpool.CallWith(context.Background(), p, local, func(context.Context, int) (int, error) { return 0, nil }); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	if !waitOrTimeout(stopped, 2*time.Second) {
		t.Errorf("Stop did not return within 2s")
	}
	if n := closes.Load(); n != 1 {
		t.Errorf("the one state was closed %d times, want 1", n)
	}
	if s := p.Status(); s.Workers != 0 {
		t.Errorf("after Stop: Workers = %d, want 0 (Busy %d, Idle %d, State %v)", s.Workers, s.Busy, s.Idle, s.State)
	}
}

// Same on a worker reaped when idle (close panics, handler calls Goexit).
// Promise: the reaped worker is gone and its state closed once; states are
// handed only to tasks of live workers; 0 <= Busy <= Workers; Stop returns.
func TestLocalClosePanicHandlerGoexitOnReap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var closes, opens atomic.Int32
		closed := map[int]bool{}
		var mu sync.Mutex
		local := workerpool.NewLocal(func() (int, error) { return int(opens.Add(1)), nil }, func(x int) {
			mu.Lock()
			closed[x] = true
			mu.Unlock()
			if closes.Add(1) > 50 {
				return // end the loop, so the bubble can end
			}
			panic("close failed")
		})
		p := workerpool.New(1, workerpool.WithIdleTimeout(time.Second),
			workerpool.WithPanicHandler(func(*workerpool.PanicError) { runtime.Goexit() }))
		if _, err := workerpool.CallWith(context.Background(), p, local, func(context.Context, int) (int, error) { return 0, nil }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // past two idle timeouts: reaped
		synctest.Wait()
		if s := p.Status(); s.Workers != 0 || closes.Load() != 1 {
			t.Errorf("after reaping: Workers=%d, closes=%d; want 0 and 1", s.Workers, closes.Load())
		}
		var inTask workerpool.Status
		x, err := workerpool.CallWith(context.Background(), p, local, func(_ context.Context, x int) (int, error) {
			inTask = p.Status()
			return x, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if closed[x] {
			t.Errorf("a task was handed state %d, which close had already closed (opens=%d)", x, opens.Load())
		}
		mu.Unlock()
		if inTask.Busy > inTask.Workers {
			t.Errorf("Status from inside the task: Busy=%d > Workers=%d", inTask.Busy, inTask.Workers)
		}
		p.Stop()
		if closes.Load() != opens.Load() {
			t.Errorf("opened %d states, close called %d times", opens.Load(), closes.Load())
		}
		if s := p.Status(); s.Workers != 0 {
			t.Errorf("after Stop: Workers = %d, want 0", s.Workers)
		}
	})
}

// ---------------------------------------------------------------------------
// Stop hammer: many submitters, every submission method, on the pool and on
// a sub-pool, racing Stop / StopWait / Shutdown (done ctx, short deadline) /
// Stop during StopWait, on an unbounded queue.

// Minimal: a Local.Submit task waiting in the queue when Stop comes is
// dropped (Status.Abandoned counts it) but Stop does not return it, no
// panic handler hears of it, and it never runs. Pool.Submit's would be
// returned. Guarantee 2: "Every accepted task runs exactly once, or is
// handed back by Stop, or is reported to its waiting caller as not run.
// Nothing is lost silently."
func TestStopDropsALocalSubmitTaskSilently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var handled atomic.Int32
		p := workerpool.New(1, workerpool.WithPanicHandler(func(*workerpool.PanicError) { handled.Add(1) }))
		local := workerpool.NewLocal(func() (int, error) { return 0, nil }, nil)
		release := make(chan struct{})
		if err := p.Submit(func() { <-release }); err != nil {
			t.Fatal(err)
		}
		var ran atomic.Bool
		if err := local.Submit(p, func(int) { ran.Store(true) }); err != nil {
			t.Fatal(err)
		}
		plain := func() {}
		if err := p.Submit(plain); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		go func() { time.Sleep(time.Second); close(release) }()
		back := p.Stop()
		s := p.Status()
		t.Logf("Stop returned %d task(s); Abandoned=%d; handler calls=%d; ran=%v", len(back), s.Abandoned, handled.Load(), ran.Load())
		if s.Abandoned == 2 && len(back) == 1 && !ran.Load() && handled.Load() == 0 {
			t.Errorf("the Local.Submit task was accepted (Submit returned nil), dropped by Stop, and lost: Stop returned only the plain task")
		}
	})
}

// AttackSkippedTaskAccounting: a Call whose ctx ends just as a worker comes
// free may be taken from the hand-off buffer by the worker after its
// submitter gave up: the worker skips it. Promises then: Pause returns once
// the tasks handed out before it have finished (none is running), and an
// idle worker is reaped within two idle timeouts. (synctest.Test fails the
// outer test at the first failing bubble, so rounds report by value.)
func TestCallGivenUpAsAWorkerTakesIt(t *testing.T) {
	rounds := 300
	pauseStuck, notReaped, skippedSeen := 0, 0, 0
	var first []string
	for range rounds {
		synctest.Test(t, func(*testing.T) {
			const workers, calls = 4, 16
			p := workerpool.New(workers, workerpool.WithIdleTimeout(time.Second))
			defer p.Stop()
			for range workers {
				_ = p.Submit(func() { time.Sleep(time.Second) })
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var ran atomic.Int32
			var wg sync.WaitGroup
			for range calls {
				wg.Go(func() {
					_, _ = workerpool.Call(ctx, p, func(context.Context) (int, error) { ran.Add(1); return 0, nil })
				})
			}
			wg.Wait()
			synctest.Wait()
			// Every Call either ran or was counted Canceled; the pool is at rest.
			if s := p.Status(); s.Canceled == 0 || s.Busy != 0 {
				return
			}
			skippedSeen++
			pctx, pcancel := context.WithTimeout(context.Background(), time.Hour)
			defer pcancel()
			start := time.Now()
			p.Pause(pctx)
			if d := time.Since(start); d > 0 {
				pauseStuck++
				if pauseStuck == 1 {
					first = append(first, fmt.Sprintf("Pause on a pool with no task running returned only when its ctx ended, after %v (fake clock); status %+v", d, p.Status()))
				}
			}
			pcancel()
			time.Sleep(3 * time.Second) // past two idle timeouts
			synctest.Wait()
			if w := p.Status().Workers; w != 0 {
				notReaped++
				if notReaped == 1 {
					first = append(first, fmt.Sprintf("an idle worker was not reaped within two idle timeouts (3s of 1s timeouts): Workers=%d", w))
				}
			}
		})
	}
	t.Logf("rounds %d, Call given up without running %d, Pause stuck %d, not reaped %d", rounds, skippedSeen, pauseStuck, notReaped)
	for _, f := range first {
		t.Error(f)
	}
	if pauseStuck+notReaped > 0 {
		t.Errorf("Pause stuck in %d/%d rounds, worker not reaped in %d/%d rounds", pauseStuck, rounds, notReaped, rounds)
	}
}

// ---------------------------------------------------------------------------
// Local under churn.

type stateTracker struct {
	mu       sync.Mutex
	opened   int
	closedN  map[int]int
	inUse    map[int]bool
	problems []string
	failOpen atomic.Int32 // every n-th open fails (0: none)
	panicOp  atomic.Int32 // every n-th open panics
	blockOp  chan struct{}
}

func newStateTracker() *stateTracker {
	return &stateTracker{closedN: map[int]int{}, inUse: map[int]bool{}}
}

func (s *stateTracker) bad(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 20 {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

func (s *stateTracker) local() *workerpool.Local[int] {
	return workerpool.NewLocal(func() (int, error) {
		if s.blockOp != nil {
			<-s.blockOp
		}
		s.mu.Lock()
		s.opened++
		id := s.opened
		s.mu.Unlock()
		if n := s.failOpen.Load(); n > 0 && id%int(n) == 0 {
			s.mu.Lock()
			s.closedN[id] = -1 // never made
			s.mu.Unlock()
			return 0, fmt.Errorf("open %d failed", id)
		}
		if n := s.panicOp.Load(); n > 0 && id%int(n) == 0 {
			s.mu.Lock()
			s.closedN[id] = -1
			s.mu.Unlock()
			panic(fmt.Sprintf("open %d panicked", id))
		}
		return id, nil
	}, func(id int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inUse[id] {
			s.problems = append(s.problems, fmt.Sprintf("state %d closed while a task holds it", id))
		}
		s.closedN[id]++
	})
}

func (s *stateTracker) use(id int, d time.Duration) {
	s.mu.Lock()
	if s.inUse[id] {
		s.problems = append(s.problems, fmt.Sprintf("state %d handed to two tasks at once", id))
	}
	if s.closedN[id] != 0 {
		s.problems = append(s.problems, fmt.Sprintf("state %d handed to a task after close (%d)", id, s.closedN[id]))
	}
	s.inUse[id] = true
	s.mu.Unlock()
	time.Sleep(d)
	s.mu.Lock()
	s.inUse[id] = false
	s.mu.Unlock()
}

// live returns how many states were made and not yet closed, and checks
// that none was closed twice.
func (s *stateTracker) live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id := 1; id <= s.opened; id++ {
		switch c := s.closedN[id]; {
		case c == 0:
			n++
		case c > 1:
			if len(s.problems) < 20 {
				s.problems = append(s.problems, fmt.Sprintf("state %d closed %d times", id, c))
			}
		}
	}
	return n
}

// On the fake clock, with real parallelism: CallWith and Local.Submit from
// many goroutines, tasks that panic or Goexit, opens that fail or panic,
// Resize up and down, reaping, a Stop variant at the end. Checks: one task
// at a time per state; never used after close; never closed under a task;
// at rest, live states <= workers, and after reaping they follow the
// workers down; every state closed exactly once when the stop returns.
func TestLocalChurn(t *testing.T) {
	var results []string
	for _, stop := range []string{"Stop", "StopWait", "ShutdownDeadline", "ShutdownDone"} {
		for round := range 10 {
			synctest.Test(t, func(*testing.T) {
				st := newStateTracker()
				st.failOpen.Store(7)
				st.panicOp.Store(11)
				local := st.local()
				p := workerpool.New(6, workerpool.WithIdleTimeout(time.Second), workerpool.WithMinWorkers(1),
					workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Go(func() {
						for i := range 30 {
							d := time.Duration((g*7+i*3)%50) * time.Millisecond
							switch (g + i + round) % 5 {
							case 0, 1:
								_, _ = workerpool.CallWith(context.Background(), p, local, func(_ context.Context, id int) (int, error) {
									st.use(id, d)
									return id, nil
								})
							case 2:
								_ = local.Submit(p, func(id int) { st.use(id, d) })
							case 3:
								_ = local.Submit(p, func(id int) { st.use(id, d); panic("task panics") })
							case 4:
								_ = local.Submit(p, func(id int) { st.use(id, d); runtime.Goexit() })
							}
							if i%10 == 9 {
								time.Sleep(time.Duration(g) * 300 * time.Millisecond)
							}
						}
					})
				}
				wg.Go(func() {
					for i := range 6 {
						time.Sleep(150 * time.Millisecond)
						p.Resize(2 + (i*5+round)%5)
					}
					p.Resize(6)
				})
				wg.Wait()
				synctest.Wait()
				s := p.Status()
				if live := st.live(); live > s.Workers {
					results = append(results, fmt.Sprintf("[%s %d] at rest: %d live states > %d workers", stop, round, live, s.Workers))
				}
				time.Sleep(3 * time.Second) // reaped to MinWorkers
				synctest.Wait()
				s = p.Status()
				if live := st.live(); live > s.Workers || s.Workers != 1 {
					results = append(results, fmt.Sprintf("[%s %d] after reaping: %d live states, %d workers (min 1)", stop, round, live, s.Workers))
				}
				// A last burst, then stop with busy workers.
				for range 6 {
					_ = local.Submit(p, func(id int) { st.use(id, time.Second) })
				}
				for range 6 {
					_ = local.Submit(p, func(id int) { st.use(id, time.Second) })
				}
				time.Sleep(500 * time.Millisecond)
				switch stop {
				case "Stop":
					p.Stop()
				case "StopWait":
					p.StopWait()
				case "ShutdownDeadline":
					ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
					_, _ = p.Shutdown(ctx)
					cancel()
				case "ShutdownDone":
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					_, _ = p.Shutdown(ctx)
				}
				if live := st.live(); live != 0 {
					results = append(results, fmt.Sprintf("[%s %d] %d states still open when %s returned", stop, round, live, stop))
				}
				for _, pr := range st.problems {
					results = append(results, fmt.Sprintf("[%s %d] %s", stop, round, pr))
				}
			})
		}
	}
	for i, r := range results {
		if i < 15 {
			t.Error(r)
		}
	}
	if len(results) > 0 {
		t.Errorf("%d problems", len(results))
	}
}

// Stop, and Resize down, while a worker is inside open: the state is made,
// handed to its task, and closed exactly once when the worker exits.
func TestLocalStopAndResizeWhileOpenRuns(t *testing.T) {
	for _, what := range []string{"Stop", "StopWait", "ShutdownDone", "Resize"} {
		t.Run(what, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStateTracker()
				st.blockOp = make(chan struct{})
				local := st.local()
				p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
				var ran atomic.Int32
				for range 2 {
					if err := local.Submit(p, func(id int) { st.use(id, time.Millisecond); ran.Add(1) }); err != nil {
						t.Fatal(err)
					}
				}
				// a third waits in the queue
				var third atomic.Bool
				_ = local.Submit(p, func(id int) { third.Store(true) })
				synctest.Wait() // both workers inside open
				done := make(chan struct{})
				go func() {
					switch what {
					case "Stop":
						p.Stop()
					case "StopWait":
						p.StopWait()
					case "ShutdownDone":
						ctx, cancel := context.WithCancel(context.Background())
						cancel()
						_, _ = p.Shutdown(ctx)
					case "Resize":
						p.Resize(1)
					}
					close(done)
				}()
				synctest.Wait()
				close(st.blockOp)
				<-done
				time.Sleep(10 * time.Millisecond) // the tasks' 1ms
				synctest.Wait()
				if ran.Load() != 2 {
					t.Errorf("%d of the 2 running tasks ran", ran.Load())
				}
				live := st.live()
				switch what {
				case "Resize":
					if w := p.Status().Workers; w != 1 || live != 1 || !third.Load() {
						t.Errorf("after Resize(1) during open: Workers %d, live states %d, third ran %v; want 1, 1, true", w, live, third.Load())
					}
					p.StopWait()
					if live := st.live(); live != 0 {
						t.Errorf("%d states open after StopWait", live)
					}
				default:
					if live != 0 {
						t.Errorf("%d states open after %s", live, what)
					}
				}
				for _, pr := range st.problems {
					t.Error(pr)
				}
			})
		})
	}
}

// open calls runtime.Goexit (as t.FailNow in a helper would). CallWith
// promises: "If the worker has none and open fails, fn does not run and
// CallWith returns open's error"; Goexit is not an error, so what does it
// return? The pool must go on with full capacity.
func TestLocalOpenGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		local := workerpool.NewLocal(func() (int, error) {
			if n.Add(1) == 1 {
				runtime.Goexit()
			}
			return int(n.Load()), nil
		}, nil)
		p := workerpool.New(1)
		defer p.StopWait()
		var fnRan bool
		v, err := workerpool.CallWith(context.Background(), p, local, func(_ context.Context, x int) (int, error) { fnRan = true; return x, nil })
		t.Logf("CallWith when open called Goexit: v=%d err=%v fnRan=%v", v, err, fnRan)
		v, err = workerpool.CallWith(context.Background(), p, local, func(_ context.Context, x int) (int, error) { return x, nil })
		if err != nil || v != 2 {
			t.Errorf("next CallWith: %d, %v; want 2, nil", v, err)
		}
		if s := p.Status(); s.Completed != 2 || s.Workers != 1 {
			t.Errorf("status %+v", s)
		}
	})
}

// A task of pool A uses CallWith on pool B with the same Local: each pool's
// workers have their own states; both are closed when each pool stops.
func TestLocalCallWithFromAnotherPoolsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStateTracker()
		local := st.local()
		a, b := workerpool.New(2), workerpool.New(2)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				_, err := workerpool.CallWith(context.Background(), a, local, func(ctx context.Context, outer int) (int, error) {
					st.use(outer, 0)
					return workerpool.CallWith(ctx, b, local, func(_ context.Context, inner int) (int, error) {
						if inner == outer {
							t.Errorf("pool B's worker got pool A's state %d", inner)
						}
						st.use(inner, time.Millisecond)
						return inner, nil
					})
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		a.StopWait()
		b.StopWait()
		if live := st.live(); live != 0 || st.opened != 4 {
			t.Errorf("opened %d (want 4: 2 per pool), live %d after both stopped", st.opened, live)
		}
		for _, pr := range st.problems {
			t.Error(pr)
		}
	})
}

// ---------------------------------------------------------------------------
// Timings on the fake clock.

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

// A Group task whose group's ctx is cancelled after a worker took it but
// before it began is skipped ("they never run, and Group.Skipped counts
// them"); Status then counts it in Completed, not Canceled, and the
// observer reports a run for it. Measures how often that happens.
func TestSkippedGroupTaskIsTimedAndCompleted(t *testing.T) {
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
