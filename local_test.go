package workerpool_test

import (
	"bytes"
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

// A conn is a stand-in for a per-worker resource: it knows whether a task
// holds it, and whether it was closed, and the tests count the live ones.
type conn struct {
	id     int
	inUse  atomic.Bool
	closed atomic.Int32
}

type conns struct {
	mu          sync.Mutex
	opened      int
	live        map[*conn]bool
	closedTwice atomic.Int32
	failNext    atomic.Bool
}

func newConns() *conns { return &conns{live: map[*conn]bool{}} }

func (c *conns) local() *workerpool.Local[*conn] {
	return workerpool.NewLocal(func() (*conn, error) {
		if c.failNext.CompareAndSwap(true, false) {
			return nil, errors.New("dial failed")
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.opened++
		x := &conn{id: c.opened}
		c.live[x] = true
		return x, nil
	}, func(x *conn) {
		if x.closed.Add(1) > 1 {
			c.closedTwice.Add(1)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.live, x)
	})
}

func (c *conns) counts() (opened, live int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened, len(c.live)
}

// use is a task body: it holds x for d, and fails the test if another task
// holds x at the same time.
func use(t *testing.T, x *conn, d time.Duration) {
	if !x.inUse.CompareAndSwap(false, true) {
		t.Errorf("conn %d handed to two tasks at once", x.id)
		return
	}
	time.Sleep(d)
	x.inUse.Store(false)
}

// Each worker makes its state once, before its first task that needs it,
// and the live states follow the workers down as idle ones are reaped;
// MinWorkers keep theirs.
func TestLocalStatesFollowTheWorkersDownWhenTheyAreReaped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8, workerpool.WithMinWorkers(2), workerpool.WithIdleTimeout(time.Second))
		c := newConns()
		local := c.local()
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				_, err := workerpool.CallWith(context.Background(), p, local, func(_ context.Context, x *conn) (int, error) {
					use(t, x, 10*time.Millisecond)
					return x.id, nil
				})
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		synctest.Wait()
		opened, live := c.counts()
		assert.Equal(t, 8, p.Status().Workers)
		assert.Equal(t, 8, opened, "one state per worker, made once")
		assert.Equal(t, 8, live)

		time.Sleep(3 * time.Second) // past two idle timeouts
		synctest.Wait()
		_, live = c.counts()
		assert.Equal(t, 2, p.Status().Workers, "reaped down to MinWorkers")
		assert.Equal(t, 2, live, "the reaped workers closed their states")

		p.StopWait()
		opened, live = c.counts()
		assert.Zero(t, live, "every state closed once the pool stopped")
		assert.Equal(t, 8, opened)
		assert.Zero(t, c.closedTwice.Load())
	})
}

// States are closed exactly once each, whatever ends their workers: Resize
// down, a panicking task (whose worker goes on, with its state), Stop with
// busy workers, StopWait and Shutdown.
func TestLocalStatesAreClosedExactlyOnceWhateverEndsTheirWorkers(t *testing.T) {
	for _, stop := range []struct {
		name string
		do   func(*workerpool.Pool)
	}{
		{"Stop", func(p *workerpool.Pool) { p.Stop() }},
		{"StopWait", (*workerpool.Pool).StopWait},
		{"Shutdown", func(p *workerpool.Pool) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			_, _ = p.Shutdown(ctx)
		}},
	} {
		t.Run(stop.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(4, workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
				c := newConns()
				local := c.local()
				for i := range 40 {
					require.NoError(t, local.Submit(p, func(x *conn) {
						use(t, x, time.Second)
						if i%7 == 0 {
							panic("a task panics; its worker keeps its state")
						}
					}))
				}
				time.Sleep(1500 * time.Millisecond)
				p.Resize(2) // two busy workers become surplus
				time.Sleep(time.Second)
				synctest.Wait()
				_, live := c.counts()
				assert.Equal(t, 2, live, "the surplus workers closed theirs as they left")
				stop.do(p) // with busy workers
				opened, live := c.counts()
				assert.Zero(t, live)
				assert.Equal(t, 4, opened, "a panic does not make a worker open another")
				assert.Zero(t, c.closedTwice.Load(), "closed exactly once")
			})
		})
	}
}

// A task that holds its worker's state while the pool shrinks keeps it
// until it ends: the state is closed after the task, not under it.
func TestATaskHoldsItsStateWhileThePoolShrinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
		defer p.StopWait()
		c := newConns()
		local := c.local()
		release := make(chan struct{})
		var closedUnderTask atomic.Bool
		for range 2 {
			require.NoError(t, local.Submit(p, func(x *conn) {
				<-release
				if x.closed.Load() > 0 {
					closedUnderTask.Store(true)
				}
			}))
		}
		synctest.Wait()
		p.Resize(1)
		synctest.Wait()
		_, live := c.counts()
		assert.Equal(t, 2, live, "both tasks still hold their states")
		close(release)
		synctest.Wait()
		_, live = c.counts()
		assert.Equal(t, 1, live, "the surplus worker closed its state after its task")
		assert.Equal(t, 1, p.Status().Workers, "and left, though nothing else happened")
		assert.False(t, closedUnderTask.Load())
	})
}

// When open fails, a CallWith gets the error and a Submit's task goes to
// the panic handler; the task does not run, and the pool goes on: the next
// task that needs the state opens it again.
func TestAFailedOpenIsReportedAndThePoolGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var handled []*workerpool.PanicError
		p := workerpool.New(1, workerpool.WithPanicHandler(func(pe *workerpool.PanicError) { handled = append(handled, pe) }))
		defer p.StopWait()
		c := newConns()
		local := c.local()

		c.failNext.Store(true)
		_, err := workerpool.CallWith(context.Background(), p, local, func(context.Context, *conn) (int, error) {
			t.Error("ran without its state")
			return 0, nil
		})
		assert.EqualError(t, err, "dial failed")

		c.failNext.Store(true)
		require.NoError(t, local.Submit(p, func(*conn) { t.Error("ran without its state") }))
		synctest.Wait()
		require.Len(t, handled, 1)
		assert.EqualError(t, handled[0].Unwrap(), "dial failed")

		n, err := workerpool.CallWith(context.Background(), p, local, func(_ context.Context, x *conn) (int, error) { return x.id, nil })
		assert.NoError(t, err)
		assert.Equal(t, 1, n)
		s := p.Status()
		assert.Equal(t, uint64(3), s.Completed)
		assert.Zero(t, s.Panicked, "a failed open is not a panic")
	})
}

// A pool that never asks for a state never makes one, and Submit is
// unchanged (see BenchmarkSubmit for the cost).
func TestALocalNobodyAsksForIsNeverOpened(t *testing.T) {
	c := newConns()
	_ = c.local()
	p := workerpool.New(2)
	for range 10 {
		require.NoError(t, p.Submit(func() {}))
	}
	p.StopWait()
	opened, _ := c.counts()
	assert.Zero(t, opened)
}

// Example_local gives each worker a scratch buffer of its own: made the
// first time the worker needs it, reused by each of its tasks, closed when
// the worker exits.
func Example_local() {
	var opened, closed atomic.Int32
	scratch := workerpool.NewLocal(func() (*bytes.Buffer, error) {
		opened.Add(1)
		return new(bytes.Buffer), nil
	}, func(*bytes.Buffer) { closed.Add(1) })

	p := workerpool.New(1)
	for i := range 100 {
		_, _ = workerpool.CallWith(context.Background(), p, scratch, func(_ context.Context, b *bytes.Buffer) (int, error) {
			b.Reset()
			fmt.Fprintf(b, "item %d", i)
			return b.Len(), nil
		})
	}
	p.StopWait()
	fmt.Println("buffers opened:", opened.Load(), "closed:", closed.Load())
	// Output: buffers opened: 1 closed: 1
}

// TestStopDoesNotLoseALocalSubmitTask: a Local.Submit task waiting in the
// queue when Stop comes is dropped (Status.Abandoned counts it). Stop must
// return it, as it returns a Pool.Submit task: not returned, never run and
// reported to no panic handler, it would be lost. Guarantee 2: "Every
// accepted task runs exactly once, or is handed back by Stop, or is
// reported to its waiting caller as not run. Nothing is lost silently."
func TestStopDoesNotLoseALocalSubmitTask(t *testing.T) {
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

func newStateTracker() *stateTracker {
	return &stateTracker{closedN: map[int]int{}, inUse: map[int]bool{}}
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

// A failed open is its task's outcome, as a panic would be, but not a
// panic: the task is counted Completed, not Panicked, and its worker is no
// longer Busy, before the panic handler hears of it, once.
func TestAFailedOpenCountsItsTaskCompletedBeforeTheHandlerHearsOfItOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []workerpool.Status
		var p *workerpool.Pool
		p = workerpool.New(1, workerpool.WithPanicHandler(func(*workerpool.PanicError) { seen = append(seen, p.Status()) }))
		x := workerpool.NewLocal(func() (int, error) { return 0, errors.New("open failed") }, nil)
		require.NoError(t, x.Submit(p, func(int) { t.Error("ran without its state") }))
		synctest.Wait()
		require.Len(t, seen, 1, "the handler hears of the failed open once")
		assert.Equal(t, uint64(1), seen[0].Completed, "Completed when the handler runs")
		assert.Zero(t, seen[0].Panicked, "a failed open is not a panic")
		assert.Zero(t, seen[0].Busy, "the worker is not Busy with the task in the handler")
		p.StopWait()
		s := p.Status()
		assert.True(t, balanced(s), "at rest: %s", fmtStatus(s))
	})
}

// NewLocal, Local.Submit and CallWith given a nil func, Local, context or
// Submitter panic at once, in the caller, with a message that names the
// function: a nil Local no longer fails on a worker, as a recovered
// *PanicError. The pool accepts nothing and opens nothing.
func TestLocalMisusePanicsNamingTheFunction(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	var opened atomic.Int32
	x := workerpool.NewLocal(func() (int, error) { opened.Add(1); return 1, nil }, nil)
	var nilLocal *workerpool.Local[int]
	bg := context.Background()
	task := func(int) {}
	fn := func(context.Context, int) (int, error) { return 0, nil }
	type misuse struct {
		name, want string
		misuse     func()
	}
	cases := []misuse{
		{"NewLocal nil open", "workerpool: NewLocal: nil open func", func() { workerpool.NewLocal[int](nil, nil) }},
		{"Local.Submit nil Local", "workerpool: Local.Submit: nil Local", func() { _ = nilLocal.Submit(p, task) }},
		{"CallWith nil context", "workerpool: CallWith: nil context", func() {
			_, _ = workerpool.CallWith(nil, p, x, fn) //nolint:staticcheck // the nil context is the point
		}},
		{"CallWith nil Local", "workerpool: CallWith: nil Local", func() { _, _ = workerpool.CallWith(bg, p, nilLocal, fn) }},
	}
	for _, ns := range nilSubmitters {
		cases = append(cases,
			misuse{"Local.Submit " + ns.name, "workerpool: Local.Submit: nil Submitter", func() { _ = x.Submit(ns.s, task) }},
			misuse{"CallWith " + ns.name, "workerpool: CallWith: nil Submitter", func() { _, _ = workerpool.CallWith(bg, ns.s, x, fn) }})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want, tc.misuse)
		})
	}
	assert.Zero(t, p.Status().Submitted)
	assert.Zero(t, opened.Load())
}

// TestAStopFromALocalsCloseKeepsTheMaximum: a worker reaped when idle, or
// retired by Resize, closes its state, and the close stops the pool while
// the other workers are busy and tasks are queued. The leaving worker no
// longer counted against the maximum, so its stop must not free a place
// for another: the pool still runs at most its maximum of tasks at once,
// and runs the queue. It used to run one more.
func TestAStopFromALocalsCloseKeepsTheMaximum(t *testing.T) {
	for _, how := range stopFromInside {
		t.Run("reaped/"+how.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var p *workerpool.Pool
				closing, letClose, closeReturned := make(chan struct{}), make(chan struct{}), make(chan struct{})
				local := workerpool.NewLocal(func() (int, error) { return 0, nil }, func(int) {
					close(closing)
					<-letClose
					_, _ = how.stop(p)
					close(closeReturned)
				})
				p = workerpool.New(2, workerpool.WithIdleTimeout(time.Second))
				_, err := workerpool.CallWith(context.Background(), p, local, func(context.Context, int) (int, error) { return 0, nil })
				require.NoError(t, err)
				<-closing // reaped: its close runs, and waits
				var c peakCounter
				release := make(chan struct{})
				for range 2 {
					require.NoError(t, p.Submit(func() { c.enter(); <-release; c.leave() }))
				}
				var ran atomic.Int32
				for range 10 {
					require.NoError(t, p.Submit(func() { c.enter(); time.Sleep(time.Millisecond); c.leave(); ran.Add(1) }))
				}
				synctest.Wait()
				close(letClose)
				synctest.Wait()
				time.Sleep(5 * time.Millisecond)
				close(release)
				<-closeReturned
				p.Stop()
				assert.LessOrEqual(t, c.peak.Load(), int64(2), "tasks at once on a pool of at most 2 workers")
				if how.name != "Stop" {
					assert.Equal(t, int32(10), ran.Load(), "%s runs the queue", how.name)
				}
			})
		})
	}
	t.Run("retired", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var p *workerpool.Pool
			var once atomic.Bool
			local := workerpool.NewLocal(func() (int, error) { return 0, nil }, func(int) {
				if once.CompareAndSwap(false, true) {
					p.StopWait()
				}
			})
			p = workerpool.New(3, workerpool.WithIdleTimeout(-1))
			var c peakCounter
			hold := make(chan struct{})
			for range 3 {
				require.NoError(t, local.Submit(p, func(int) { c.enter(); <-hold; c.leave() }))
			}
			synctest.Wait()
			var ran atomic.Int32
			for range 20 {
				require.NoError(t, p.Submit(func() { c.enter(); time.Sleep(time.Millisecond); c.leave(); ran.Add(1) }))
			}
			c.peak.Store(0)
			go p.Resize(1)
			synctest.Wait()
			close(hold)
			p.StopWait()
			assert.LessOrEqual(t, c.peak.Load(), int64(1), "tasks at once after Resize(1)")
			assert.Equal(t, int32(20), ran.Load())
		})
	})
}

// TestAStopFromALocalsOpenIsWaitedForOutside: a Local's open stops the
// pool; a StopWait from outside returns only once the task whose open it
// was has run, as it returns only once every accepted task has. It used to
// return first.
func TestAStopFromALocalsOpenIsWaitedForOutside(t *testing.T) {
	for _, how := range stopFromInside {
		t.Run(how.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var p *workerpool.Pool
				opened := make(chan struct{})
				local := workerpool.NewLocal(func() (int, error) {
					close(opened)
					_, _ = how.stop(p)
					return 1, nil
				}, nil)
				p = workerpool.New(1)
				var ran atomic.Int32
				require.NoError(t, local.Submit(p, func(int) { ran.Add(1) }))
				<-opened
				p.StopWait()
				assert.Equal(t, int32(1), ran.Load(), "the task whose open stopped the pool")
			})
		})
	}
}

// TestLocalSubmitFollowsTheOverflowPolicy: Local.Submit on a full bounded
// queue returns ErrQueueFull at once under Reject, and waits for room under
// Block and under CallerRuns, as its task needs a worker's state. Break 5
// of issue 35: under Reject it waited.
func TestLocalSubmitFollowsTheOverflowPolicy(t *testing.T) {
	x := workerpool.NewLocal(func() (int, error) { return 1, nil }, nil)
	for _, o := range []workerpool.Overflow{workerpool.Reject, workerpool.Block, workerpool.CallerRuns} {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(o))
				block := make(chan struct{})
				for range 2 { // one running, one waiting: the queue is full
					require.NoError(t, p.Submit(func() { <-block }))
				}
				synctest.Wait()
				var ran atomic.Bool
				done := make(chan error, 1)
				go func() { done <- x.Submit(p, func(int) { ran.Store(true) }) }()
				synctest.Wait()
				select {
				case err := <-done:
					if o == workerpool.Reject {
						assert.ErrorIs(t, err, workerpool.ErrQueueFull)
					} else {
						t.Errorf("guarantees.md 3: under %v, Local.Submit returned %v while the queue was full", o, err)
					}
					close(block)
				default:
					if o == workerpool.Reject {
						t.Errorf("guarantees.md 3: under Reject, Local.Submit waited for room in a full queue instead of returning ErrQueueFull at once")
					}
					close(block) // a Local.Submit that waits gets its room: the test ends, failed, instead of hanging
					assert.NoError(t, <-done)
				}
				p.StopWait()
				if !t.Failed() {
					assert.Equal(t, o != workerpool.Reject, ran.Load(), "the task ran unless rejected")
				}
			})
		})
	}
}
