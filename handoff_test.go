package workerpool_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests in this file submit tasks while every worker is busy, so that
// they wait in the pool's hand-off buffer rather than its queue, and check
// that a pause, a stop and a Shutdown deadline hold them back as they would
// hold back queued tasks.

func TestPauseHoldsTasksThatWaitedBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		release := hold(t, p, 2)
		var mu sync.Mutex
		var order []int
		for i := range 10 { // every worker is busy: these wait
			require.NoError(t, p.Submit(func() { mu.Lock(); order = append(order, i); mu.Unlock() }))
		}
		synctest.Wait()
		require.Equal(t, 10, p.WaitingQueueSize())

		ctx, resume := context.WithCancel(context.Background())
		paused := make(chan struct{})
		go func() { p.Pause(ctx); close(paused) }()
		synctest.Wait()
		release() // the running tasks end: Pause returns, and nothing starts
		<-paused
		time.Sleep(time.Hour)
		mu.Lock()
		assert.Empty(t, order, "no waiting task started during the pause")
		mu.Unlock()
		assert.Equal(t, 10, p.WaitingQueueSize())
		assert.Zero(t, p.Status().Busy)

		resume()
		p.StopWait()
		assert.Len(t, order, 10)
	})
}

func TestStopReturnsTasksThatWaitedForABusyWorkerInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(3)
		release := hold(t, p, 3)
		var got []int
		for i := range 100 {
			require.NoError(t, p.Submit(func() { got = append(got, i) }))
		}
		synctest.Wait()
		stopped := make(chan []func())
		go func() { stopped <- p.Stop() }()
		synctest.Wait()
		release()
		for _, task := range <-stopped {
			task()
		}
		want := make([]int, 100)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, got, "every waiting task came back, in order, and none ran")
		assert.Equal(t, uint64(100), p.Status().Abandoned)
	})
}

// TestNoWaitingTaskStartsAfterAShutdownDeadlineAsManyWorkersComeFree has
// eight workers end their tasks exactly at the deadline, with a hundred
// tasks waiting behind them: none may start, and all come back in order.
func TestNoWaitingTaskStartsAfterAShutdownDeadlineAsManyWorkersComeFree(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(8)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for range 8 {
				require.NoError(t, p.Submit(func() { <-ctx.Done() }))
			}
			var started atomic.Int64
			var identifying bool // set once the pool has stopped
			var got []int
			for i := range 100 {
				require.NoError(t, p.Submit(func() {
					if identifying {
						got = append(got, i)
						return
					}
					started.Add(1)
				}))
			}
			waitErr := make(chan error)
			go func() { waitErr <- p.SubmitWait(func() { t.Error("a waiting SubmitWait task ran") }) }()
			synctest.Wait()
			tasks, err := p.Shutdown(ctx)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.ErrorIs(t, <-waitErr, workerpool.ErrStopped)
			assert.Zero(t, started.Load(), "no waiting task started after the deadline")
			require.Len(t, tasks, 100)
			identifying = true // calling them now records their order
			for _, task := range tasks {
				task()
			}
			want := make([]int, 100)
			for i := range want {
				want[i] = i
			}
			assert.Equal(t, want, got, "in the order they were submitted")
			assert.Equal(t, uint64(101), p.Status().Abandoned)
		})
	}
}

func TestABoundedQueueCountsEveryWaitingTaskAgainstItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithMaxWaiting(5), workerpool.WithOverflow(workerpool.Reject))
		release := hold(t, p, 2+5)
		synctest.Wait()
		assert.Equal(t, 5, p.WaitingQueueSize())
		assert.ErrorIs(t, p.Submit(func() {}), workerpool.ErrQueueFull, "five wait: the queue is full")
		s := p.Status()
		assert.Equal(t, 5, s.Waiting)
		assert.Equal(t, 5, s.PeakWaiting)
		release()
		p.StopWait()
	})
}

func TestABlockedSubmitterGetsInAsSoonAsAWaitingTaskStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(3))
		for range 4 { // one runs, three wait: full
			require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		}
		start := time.Now()
		require.NoError(t, p.Submit(func() {}))
		assert.Equal(t, time.Second, time.Since(start), "accepted when the first task ended and the second started")
		p.StopWait()
		assert.Equal(t, 3, p.Status().PeakWaiting)
	})
}

// ---------------------------------------------------------------------------
// Take-backs: a pause, a resize, another queue's turn, a sub-pool's Stop, a
// Call that gives up take tasks back from the hand-off buffer. What is taken
// back keeps its place: each queue still starts in acceptance order, a
// stop still returns the rest in order, and the pool goes on.

func rvDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// rvWithin runs f and fails the test with a goroutine dump if it does not
// return within d.
func rvWithin(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("HANG: %s did not return within %v\n%s", what, d, rvDump())
	}
}

// rvLog records task starts, per queue, and tasks returned by Stop.
type rvLog struct {
	mu       sync.Mutex
	started  map[string][]int
	returned map[string][]int
	stopped  atomic.Bool // set once Stop returned: later calls are returns
}

func (l *rvLog) task(q string, i int) func() {
	return func() {
		l.mu.Lock()
		if l.stopped.Load() {
			l.returned[q] = append(l.returned[q], i)
		} else {
			l.started[q] = append(l.started[q], i)
		}
		l.mu.Unlock()
	}
}

// check verifies, for queue q whose tasks 0..n-1 were accepted in that
// order: starts are in order, with exactly those expected (a prefix if
// dropped is allowed), returns are the rest, in order.
func (l *rvLog) check(t *testing.T, q string, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	s, r := l.started[q], l.returned[q]
	all := append(slices.Clone(s), r...)
	for i, v := range all {
		if v != i {
			lo, hi := max(0, i-5), min(len(all), i+6)
			t.Fatalf("queue %q: started(%d)+returned(%d) not 0..%d in order: at %d got %d; around: %v (started=%d)",
				q, len(s), len(r), n-1, i, v, all[lo:hi], len(s))
		}
	}
	if len(all) != n {
		t.Fatalf("queue %q: %d started + %d returned = %d, want %d accepted", q, len(s), len(r), len(all), n)
	}
}

func newRVLog() *rvLog {
	return &rvLog{started: map[string][]int{}, returned: map[string][]int{}}
}

// A sub-pool's Stop takes its tasks back from the hand-off buffer while a
// worker takes them. Afterwards the pool must still work: Pause returns as
// soon as nothing runs, and a free worker starts what waits.

func TestPauseReturnsAtOnceAfterASubpoolsStopTookBackItsTasks(t *testing.T) {
	rounds := 150
	bad := 0
	for round := range rounds {
		p := workerpool.New(1)
		s := p.Subpool("s", 1)
		l := newRVLog()
		const n = 300
		var accepted int
		stopAt := 20 + rand.IntN(200)
		var dropped []func()
		for i := range n {
			if i == stopAt {
				dropped = s.Stop()
				break
			}
			if err := s.Submit(l.task("s", i)); err != nil {
				t.Fatalf("round %d: Submit %d: %v", round, i, err)
			}
			accepted++
		}
		l.stopped.Store(true)
		for _, f := range dropped {
			f()
		}
		l.check(t, "s", accepted)
		// Nothing runs now. Pause must return at once.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t0 := time.Now()
		p.Pause(ctx)
		el := time.Since(t0)
		st := p.Status()
		cancel()
		if el > time.Second {
			bad++
			if bad == 1 {
				t.Errorf("round %d: Pause on an idle pool took %v (returned by its ctx, not because no task runs) after Subpool.Stop cut %d of %d tasks; status %s",
					round, el, len(dropped), accepted, fmtStatus(st))
			}
		}
		rvWithin(t, 5*time.Second, "Stop", func() { p.Stop() })
	}
	if bad > 0 {
		t.Errorf("%d/%d rounds: Pause hung until its ctx ended", bad, rounds)
	}
}

// The same phantom, shown as a task that never starts although a worker is
// free: 2 workers; key "a" runs a task that waits for an unkeyed task
// submitted behind a second "a" task.
func TestAFreeWorkerStartsAWaitingTaskAfterASubpoolsStopTookBackItsTasks(t *testing.T) {
	rounds := 150
	bad := 0
	for round := range rounds {
		p := workerpool.New(2)
		s := p.Subpool("s", 2)
		const n = 300
		stopAt := 20 + rand.IntN(200)
		for i := range n {
			if i == stopAt {
				s.Stop()
				break
			}
			if err := s.Submit(func() {}); err != nil {
				t.Fatal(err)
			}
		}
		// a1 runs and waits for u; a2 is held by key a; u is behind a2.
		uRan := make(chan struct{})
		release := make(chan struct{})
		p.SubmitKey("a", func() {
			select {
			case <-uRan:
			case <-release:
			}
		})
		p.SubmitKey("a", func() {})
		p.Submit(func() { close(uRan) })
		select {
		case <-uRan:
		case <-time.After(2 * time.Second):
			bad++
			if bad == 1 {
				t.Errorf("round %d: an unkeyed task waited 2s with a worker free (a busy key held a task ahead of it); status %s",
					round, fmtStatus(p.Status()))
			}
			close(release)
		}
		rvWithin(t, 5*time.Second, "StopWait", p.StopWait)
	}
	if bad > 0 {
		t.Errorf("%d/%d rounds: a task did not start with a worker free", bad, rounds)
	}
}

// A worker that comes free finds the dispatcher's hand-offs revoked but
// still in the buffer, while the only waiting tasks are of a lane a busy
// key holds to free workers. The dispatcher must see the worker come free
// and hand it a task: a free worker never sits beside waiting tasks.
//
// Two workers: k1 (sub-pool s) waits until one of s's unkeyed tasks has
// run; the pool's task b frees its worker through a slow panic handler,
// through a slow task observer, or (with MinWorkers 2, so that no reaping
// tick wakes the dispatcher) through a quick panic handler. Between them,
// 64 unkeyed tasks of s fill the buffer, k2 waits behind busy k1, and
// s.Resize takes the 64 back, which leaves their hand-offs revoked in the
// buffer. The dispatcher used to wait for a worker's report that never
// came: in the third case, for ever.
func TestAFreeWorkerStartsAWaitingTaskThoughTheBufferHoldsRevokedHandOffs(t *testing.T) {
	var slowObserver atomic.Bool
	for _, tc := range []struct {
		name   string
		opts   []workerpool.Option
		ending func()
	}{
		{"after a slow panic handler", []workerpool.Option{workerpool.WithIdleTimeout(-1),
			workerpool.WithPanicHandler(func(*workerpool.PanicError) { time.Sleep(time.Second) })}, func() { panic("b") }},
		{"after a slow task observer", []workerpool.Option{workerpool.WithIdleTimeout(-1),
			workerpool.WithTaskObserver(func(workerpool.TaskTiming) {
				if slowObserver.CompareAndSwap(true, false) {
					time.Sleep(time.Second)
				}
			})}, func() { slowObserver.Store(true) }},
		{"with no reaping tick", []workerpool.Option{workerpool.WithMinWorkers(2),
			workerpool.WithPanicHandler(func(*workerpool.PanicError) { time.Sleep(time.Millisecond) })}, func() { panic("b") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2, tc.opts...)
				s := p.Subpool("s", 100)
				sRan, giveUp, releaseB := make(chan struct{}), make(chan struct{}), make(chan struct{})
				require.NoError(t, s.SubmitKey("k", func() {
					select {
					case <-sRan:
					case <-giveUp:
					}
				}))
				require.NoError(t, p.Submit(func() { <-releaseB; tc.ending() }))
				synctest.Wait()
				var once sync.Once
				for range 64 {
					require.NoError(t, s.Submit(func() { once.Do(func() { close(sRan) }) }))
				}
				require.NoError(t, s.SubmitKey("k", func() {})) // held back by busy k1
				s.Resize(100)                                   // takes the 64 back
				synctest.Wait()
				close(releaseB)
				if !waitOrTimeout(sRan, 10*time.Second) {
					t.Errorf("b's worker came free and none of s's 64 waiting tasks started in 10 s: %s", fmtStatus(p.Status()))
				}
				close(giveUp)
				p.StopWait()
			})
		})
	}
}

// The same with the revoked hand-offs left by a sub-pool's Stop on a
// bounded queue (whose buffer holds as many as the bound), under each
// overflow policy, and by Calls that gave up while they waited in the
// buffer: the task u, behind a second task of busy key k, waits for a
// free worker, and b's worker comes free.
func TestAFreeWorkerStartsAWaitingTaskAfterStopsAndGiveUpsLeftRevokedHandOffs(t *testing.T) {
	type revoke func(t *testing.T, p *workerpool.Pool)
	subpoolStop := func(t *testing.T, p *workerpool.Pool) {
		s := p.Subpool("s", 10)
		for range 4 { // the bound: the buffer's size
			require.NoError(t, s.Submit(func() {}))
		}
		require.Len(t, s.Stop(), 4)
	}
	callsGiveUp := func(t *testing.T, p *workerpool.Pool) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { _, _ = workerpool.Call(ctx, p, func(context.Context) (int, error) { return 0, nil }) })
		}
		synctest.Wait()
		cancel()
		wg.Wait()
	}
	for _, tc := range []struct {
		name   string
		o      workerpool.Overflow
		revoke revoke
	}{
		{"a sub-pool's Stop, block", workerpool.Block, subpoolStop},
		{"a sub-pool's Stop, reject", workerpool.Reject, subpoolStop},
		{"a sub-pool's Stop, caller-runs", workerpool.CallerRuns, subpoolStop},
		{"calls that gave up", workerpool.Block, callsGiveUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2, workerpool.WithMaxWaiting(4), workerpool.WithOverflow(tc.o), workerpool.WithMinWorkers(2),
					workerpool.WithPanicHandler(func(*workerpool.PanicError) { time.Sleep(time.Millisecond) }))
				uRan, releaseB := make(chan struct{}), make(chan struct{})
				require.NoError(t, p.SubmitKey("k", func() { <-uRan }))
				require.NoError(t, p.Submit(func() { <-releaseB; panic("b") }))
				synctest.Wait()
				tc.revoke(t, p)
				synctest.Wait()
				require.NoError(t, p.SubmitKey("k", func() {})) // held back by the busy key
				require.NoError(t, p.Submit(func() { close(uRan) }))
				synctest.Wait()
				close(releaseB)
				if !waitOrTimeout(uRan, 10*time.Second) {
					t.Errorf("b's worker came free and u did not start in 10 s: %s", fmtStatus(p.Status()))
					go p.Resize(3) // wakes the dispatcher, so that the bubble can end
				}
				p.StopWait()
			})
		})
	}
}

// On the real scheduler: one worker, one sequential submitter per queue (so
// acceptance order is submission order), and a disruptor that takes the
// buffer back in every way it can.

type rvDisrupt int

func (d rvDisrupt) String() string {
	return [...]string{"pause", "subResize", "otherLane", "newSub", "call", "stopOtherSub"}[d]
}

const (
	rvPause rvDisrupt = iota
	rvResizeSub
	rvOtherLane
	rvNewSub
	rvCall
	rvStopOtherSub
	rvNDisrupt
)

func rvDisruptor(ctx context.Context, p *workerpool.Pool, kinds []rvDisrupt, other *workerpool.Subpool) {
	idle := p.Subpool("idle", 1)
	i := 0
	for ctx.Err() == nil {
		i++
		switch kinds[rand.IntN(len(kinds))] {
		case rvPause:
			pctx, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(200))*time.Microsecond)
			p.Pause(pctx)
			cancel()
		case rvResizeSub:
			idle.Resize(1 + i%3)
		case rvOtherLane:
			other.Submit(func() {})
		case rvNewSub:
			ns := p.Subpool("new", 1)
			ns.Submit(func() {})
			ns.SubmitKey("k", func() {})
			ns.StopWait()
		case rvCall:
			cctx, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(100))*time.Microsecond)
			go func() {
				defer cancel()
				workerpool.Call(cctx, p, func(context.Context) (int, error) { return 0, nil })
			}()
		case rvStopOtherSub:
			os := p.Subpool("doomed", 1)
			for range 1 + rand.IntN(10) {
				os.Submit(func() {})
			}
			os.Stop()
		}
		runtime.Gosched()
	}
}

func rvOrderRound(t *testing.T, round int, kinds []rvDisrupt, useStop bool, keyed bool) {
	p := workerpool.New(1)
	other := p.Subpool("other", 1)
	q := p.Subpool("q", 1)
	l := newRVLog()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); rvDisruptor(ctx, p, kinds, other) }()

	const n = 800
	var accOwn, accQ atomic.Int64
	var subWG sync.WaitGroup
	submitTo := func(name string, submit func(i int, f func()) error, acc *atomic.Int64) {
		defer subWG.Done()
		for i := range n {
			f := l.task(name, i)
			spin := rand.IntN(3) == 0
			g := func() {
				f()
				if spin {
					for range 200 {
						runtime.Gosched()
					}
				}
			}
			if err := submit(i, g); err != nil {
				return // stopped
			}
			acc.Add(1)
		}
	}
	subWG.Add(2)
	go submitTo("own", func(i int, f func()) error {
		if keyed && i%3 != 0 {
			return p.SubmitKey(fmt.Sprint("k", i%4), f)
		}
		return p.Submit(f)
	}, &accOwn)
	go submitTo("q", func(i int, f func()) error {
		if keyed && i%2 == 0 {
			return q.SubmitKey(fmt.Sprint("k", i%3), f)
		}
		return q.Submit(f)
	}, &accQ)

	var dropped []func()
	if useStop {
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		if round%2 == 0 {
			rvWithin(t, 10*time.Second, fmt.Sprintf("round %d: Stop", round), func() { dropped = p.Stop() })
		} else {
			sctx, scancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(2000))*time.Microsecond)
			rvWithin(t, 10*time.Second, fmt.Sprintf("round %d: Shutdown", round), func() { dropped, _ = p.Shutdown(sctx) })
			scancel()
		}
		cancel()
		rvWithin(t, 10*time.Second, "submitters", subWG.Wait)
	} else {
		rvWithin(t, 20*time.Second, fmt.Sprintf("round %d: submitters", round), subWG.Wait)
		cancel()
		rvWithin(t, 10*time.Second, "disruptor", wg.Wait)
		rvWithin(t, 10*time.Second, fmt.Sprintf("round %d: StopWait", round), p.StopWait)
	}
	wg.Wait()
	st := p.Status()
	l.stopped.Store(true)
	for _, f := range dropped {
		f()
	}
	l.check(t, "own", int(accOwn.Load()))
	l.check(t, "q", int(accQ.Load()))
	if !balanced(st) {
		t.Fatalf("round %d: status does not balance at rest: %s", round, fmtStatus(st))
	}
	if !useStop && (st.Waiting != 0 || st.Busy != 0) {
		t.Fatalf("round %d: after StopWait: %s", round, fmtStatus(st))
	}
}

func TestEachQueueStartsInAcceptanceOrderUnderTakeBacks(t *testing.T) {
	for k := range rvNDisrupt {
		for _, keyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/keyed=%v", k, keyed), func(t *testing.T) {
				for round := range rounds(10) {
					rvOrderRound(t, round, []rvDisrupt{k}, false, keyed)
				}
			})
		}
	}
	t.Run("all", func(t *testing.T) {
		all := []rvDisrupt{rvPause, rvResizeSub, rvOtherLane, rvNewSub, rvCall, rvStopOtherSub}
		for round := range rounds(30) {
			rvOrderRound(t, round, all, false, round%2 == 0)
		}
	})
}

func TestAStopUnderTakeBacksStartsAPrefixOfEachQueueAndReturnsTheRest(t *testing.T) {
	all := []rvDisrupt{rvPause, rvResizeSub, rvOtherLane, rvNewSub, rvCall, rvStopOtherSub}
	for round := range 40 {
		rvOrderRound(t, round, all, true, round%4 < 2)
	}
}

// Deterministic: synctest, one worker, the buffer full, then take-backs.

func TestTasksTakenBackByAPauseAResizeAndANewQueueKeepTheirOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		l := newRVLog()
		gate := make(chan struct{})
		p.Submit(func() { <-gate })
		const n = 150
		for i := range n {
			if i%5 == 0 {
				p.SubmitKey("x", l.task("own", i))
			} else {
				p.Submit(l.task("own", i))
			}
		}
		synctest.Wait()
		// Take backs while the worker is blocked.
		ctx, cancel := context.WithCancel(context.Background())
		go p.Pause(ctx)
		synctest.Wait()
		s := p.Subpool("late", 1)
		lt := newRVLog()
		for i := range 5 {
			s.Submit(lt.task("late", i))
		}
		p.Resize(1)
		cancel()
		synctest.Wait()
		close(gate)
		p.StopWait()
		l.check(t, "own", n)
		lt.check(t, "late", 5)
	})
}

// A busy key holds its next task; later tasks must not sit in the buffer
// ahead of it (promise 2). One worker: k1 in the buffer behind a blocker, k2
// held, then u3..; after the blocker, order must be k1, k2, u3...
func TestABusyKeysNextTaskIsNotOvertakenAcrossAPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		l := newRVLog()
		gate := make(chan struct{})
		p.Submit(func() { <-gate })
		p.SubmitKey("k", l.task("own", 0))
		p.SubmitKey("k", l.task("own", 1))
		for i := 2; i < 70; i++ {
			p.Submit(l.task("own", i))
		}
		ctx, cancel := context.WithCancel(context.Background())
		go p.Pause(ctx)
		synctest.Wait()
		cancel()
		synctest.Wait()
		p.SubmitKey("k", l.task("own", 70))
		p.Submit(l.task("own", 71))
		close(gate)
		p.StopWait()
		l.check(t, "own", 72)
	})
}

// The bound on waiting tasks, counted by the submitters, not read from
// Status: on a pool of two workers and a bound of five, tasks that never
// end until the test lets them take a worker or a place in the queue for
// good, so at most seven are ever accepted, while pauses, sub-pool resizes
// and stops, and Calls that give up take hand-offs back and free places.
// A place freed twice, or a take-back that let a task in without room,
// would let an eighth in. Then every task accepted runs once.
func TestTheBoundHoldsCountedByTheSubmitters(t *testing.T) {
	const workers, bound = 2, 5
	for round := range rounds(40) {
		p := workerpool.New(workers, workerpool.WithMaxWaiting(bound), workerpool.WithOverflow(workerpool.Reject))
		s := p.Subpool("s", 2)
		gate := make(chan struct{})
		var accepted, ran atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { rvDisruptor(ctx, p, []rvDisrupt{rvPause, rvResizeSub, rvCall, rvStopOtherSub}, nil) })
		for g := range 3 {
			to := []workerpool.Submitter{p, s, p}[g]
			wg.Go(func() {
				for ctx.Err() == nil {
					if to.TrySubmit(func() { <-gate; ran.Add(1) }) == nil {
						accepted.Add(1)
					}
					runtime.Gosched()
				}
			})
		}
		time.Sleep(20 * time.Millisecond)
		cancel()
		wg.Wait()
		n := accepted.Load()
		close(gate)
		p.StopWait()
		require.LessOrEqual(t, n, int64(workers+bound), "round %d: tasks that never ended were accepted beyond the workers and the bound", round)
		require.Equal(t, n, ran.Load(), "round %d: every task accepted ran once", round)
	}
}

// The bound on waiting tasks holds in every snapshot while take-backs run.

func TestTheBoundOnWaitingTasksHoldsUnderTakeBacks(t *testing.T) {
	for round := range rounds(30) {
		const bound = 20
		p := workerpool.New(1, workerpool.WithMaxWaiting(bound))
		other := p.Subpool("other", 1)
		q := p.Subpool("q", 1)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			rvDisruptor(ctx, p, []rvDisrupt{rvPause, rvResizeSub, rvOtherLane, rvCall, rvStopOtherSub}, other)
		}()
		var worst atomic.Int64
		var worstS atomic.Value
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				for i, s := range []workerpool.Status{p.Status(), other.Status(), q.Status()} {
					if m := int64(max(s.Waiting, s.PeakWaiting)); m > worst.Load() {
						worst.Store(m)
						worstS.Store(fmt.Sprintf("queue %d: %s", i, fmtStatus(s)))
					}
				}
				runtime.Gosched()
			}
		}()
		var subs sync.WaitGroup
		for g := range 3 {
			subs.Add(1)
			go func() {
				defer subs.Done()
				for i := range 400 {
					if g == 0 && i%2 == 0 {
						p.SubmitKey("k", func() {})
					} else if g == 1 {
						q.SubmitKey(fmt.Sprint(i%3), func() {})
					} else {
						p.Submit(func() {})
					}
				}
			}()
		}
		rvWithin(t, 20*time.Second, "submitters", subs.Wait)
		cancel()
		rvWithin(t, 10*time.Second, "disruptor", wg.Wait)
		rvWithin(t, 10*time.Second, "StopWait", p.StopWait)
		st := p.Status()
		if !balanced(st) {
			t.Fatalf("round %d: unbalanced at rest: %s", round, fmtStatus(st))
		}
		if w := worst.Load(); w > bound || st.PeakWaiting > bound {
			t.Fatalf("round %d: Waiting/PeakWaiting %d (final peak %d) over the bound %d: %v", round, w, st.PeakWaiting, bound, worstS.Load())
		}
	}
}
