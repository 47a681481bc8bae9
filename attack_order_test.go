package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

// ---------------------------------------------------------------------------
// (a) Order within one queue, keys.

// TestCanceledCallsLeaveKeyedAndUnkeyedOrderIntact: one worker,
// busy. The queue holds, in acceptance order, a mix of Calls (some whose
// contexts end while they wait), keyed and unkeyed tasks. The Calls that
// give up leave; the others keep acceptance order.
func TestCanceledCallsLeaveKeyedAndUnkeyedOrderIntact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1)
		synctest.Wait()
		var l starts
		var cancels []context.CancelFunc
		var wg sync.WaitGroup
		call := func(name string, cancelIt bool) {
			ctx, cancel := context.WithCancel(context.Background())
			if cancelIt {
				cancels = append(cancels, cancel)
			} else {
				t.Cleanup(cancel)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				workerpool.Call(ctx, p, func(context.Context) (int, error) { l.task(name)(); return 0, nil })
			}()
			synctest.Wait() // accepted before the next
		}
		call("c1", true)
		atkNoErr(t, p.SubmitKey("a", l.task("a1")))
		call("c2", false)
		atkNoErr(t, p.Submit(l.task("u1")))
		call("c3", true)
		atkNoErr(t, p.SubmitKey("a", l.task("a2")))
		atkNoErr(t, p.SubmitKey("b", l.task("b1")))
		call("c4", true)
		atkNoErr(t, p.Submit(l.task("u2")))
		for _, c := range cancels {
			c()
		}
		synctest.Wait()
		release()
		p.StopWait()
		wg.Wait()
		// a2 waits for a1, which is handed out before it: with one worker,
		// a1 has ended by the time a2 could go.
		want := []string{"a1", "c2", "u1", "a2", "b1", "u2"}
		if got := l.got(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

// ---------------------------------------------------------------------------
// (b) Turns.

// ---------------------------------------------------------------------------
// (c) Stop.

// ---------------------------------------------------------------------------
// Real scheduler: Stop's cut and returned order, under churn.

// atkRec is one submission in the real-scheduler attack.
type atkRec struct {
	id        int
	lane      int    // 0 pool, 1 a, 2 b
	key       string // "" unkeyed
	kind      int    // 0 fire-and-forget, 1 SubmitWait, 2 Call, 3 Group task
	callT     int64  // ticket before the submission was made
	retT      int64  // ticket after it returned (0: unknown: a waiter)
	accepted  bool   // known accepted (fire-and-forget: nil error)
	starts    atomic.Int32
	returned  int
	err       error
	gaveUp    bool // a Call that returned its ctx's error
	startedAt int64
}

type atkWorld struct {
	mu      sync.Mutex
	tickets atomic.Int64
	recs    []*atkRec
	// running per (lane, key): for overlap
	keyRun  map[string]int
	overlap []string
	order   map[string][]int // per lane/key: ids in start order
	startT  atomic.Int64
}

func (w *atkWorld) newRec(lane int, key string, kind int) *atkRec {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := &atkRec{id: len(w.recs), lane: lane, key: key, kind: kind}
	w.recs = append(w.recs, r)
	return r
}

func (w *atkWorld) body(r *atkRec, behave int, nested func()) func() {
	return func() {
		r.starts.Add(1)
		r.startedAt = w.startT.Add(1)
		lk := fmt.Sprint(r.lane, "/", r.key)
		if r.key != "" {
			w.mu.Lock()
			w.keyRun[lk]++
			if w.keyRun[lk] > 1 {
				w.overlap = append(w.overlap, lk)
			}
			w.order[lk] = append(w.order[lk], r.id)
			w.mu.Unlock()
			defer func() {
				w.mu.Lock()
				w.keyRun[lk]--
				w.mu.Unlock()
			}()
		}
		if nested != nil {
			nested()
		}
		switch behave {
		case 1:
			panic("atk")
		case 2:
			runtime.Goexit()
		case 3:
			time.Sleep(50 * time.Microsecond)
		case 4:
			runtime.Gosched()
		}
	}
}

// known reports whether y is known to have been accepted before x.
func atkBefore(y, x *atkRec) bool { return y.retT != 0 && y.retT < x.callT }

func TestStopCutsEachQueueBetweenAPrefixAndTheRestOnTheRealScheduler(t *testing.T) {
	rounds := 40
	if raceEnabled {
		rounds = 15
	}
	for round := range rounds {
		seed := uint64(time.Now().UnixNano())
		if !atkRound(t, round, seed) {
			t.Logf("round %d seed %d failed", round, seed)
			return
		}
	}
}

func atkRound(t *testing.T, round int, seed uint64) bool {
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	maxW := 1 + rng.IntN(3)
	p := workerpool.New(maxW, workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
	a, b := p.Subpool("a", 1+rng.IntN(2)), p.Subpool("b", 1)
	subs := []workerpool.Submitter{p, a, b}
	w := &atkWorld{keyRun: map[string]int{}, order: map[string][]int{}}
	keys := []string{"", "", "x", "y"}
	stopAt := 50 + rng.IntN(250)
	mode := rng.IntN(3) // 0 Stop; 1 Stop racing a Shutdown past its deadline; 2 Stop racing a sub-pool's Stop and another's StopWait
	var bg sync.WaitGroup
	stopCtl := make(chan struct{})
	// Controller: pauses and resizes.
	bg.Add(1)
	go func() {
		defer bg.Done()
		crng := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-stopCtl:
				return
			default:
			}
			switch crng.IntN(4) {
			case 0:
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(crng.IntN(300))*time.Microsecond)
				p.Pause(ctx)
				<-ctx.Done()
				cancel()
			case 1:
				p.Resize(1 + crng.IntN(3))
			case 2:
				a.Resize(1 + crng.IntN(3))
			case 3:
				time.Sleep(time.Duration(crng.IntN(200)) * time.Microsecond)
			}
		}
	}()
	var submit func(r *atkRec, s workerpool.Submitter, fn func()) error
	submit = func(r *atkRec, s workerpool.Submitter, fn func()) error {
		r.callT = w.tickets.Add(1)
		var err error
		if r.key != "" {
			err = s.SubmitKey(r.key, fn)
		} else {
			err = s.Submit(fn)
		}
		r.retT = w.tickets.Add(1)
		r.err = err
		r.accepted = err == nil
		return err
	}
	nestedFor := func(lane int, key string) func() {
		return func() {
			r := w.newRec(lane, key, 0)
			submit(r, subs[lane], w.body(r, 0, nil))
		}
	}
	g := p.Group(context.Background())
	var stopped sync.WaitGroup
	var got [][]func()
	var gotMu sync.Mutex
	for i := 0; i < 400; i++ {
		if i == stopAt {
			keep := func(fs []func()) {
				gotMu.Lock()
				got = append(got, fs)
				gotMu.Unlock()
			}
			stopped.Go(func() { keep(p.Stop()) })
			switch mode {
			case 1:
				stopped.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Microsecond)
					defer cancel()
					fs, _ := p.Shutdown(ctx)
					keep(fs)
				})
			case 2:
				stopped.Go(func() { keep(a.Stop()) })
				stopped.Go(b.StopWait)
			}
		}
		lane := rng.IntN(3)
		key := keys[rng.IntN(len(keys))]
		behave := rng.IntN(6)
		switch k := rng.IntN(10); {
		case k < 6:
			r := w.newRec(lane, key, 0)
			var nested func()
			if rng.IntN(8) == 0 {
				nested = nestedFor(rng.IntN(3), keys[rng.IntN(len(keys))])
			}
			submit(r, subs[lane], w.body(r, behave, nested))
		case k < 7:
			r := w.newRec(lane, "", 1)
			r.callT = w.tickets.Add(1)
			bg.Add(1)
			go func() {
				defer bg.Done()
				r.err = subs[lane].SubmitWait(w.body(r, behave, nil))
			}()
		case k < 9:
			r := w.newRec(lane, "", 2)
			r.callT = w.tickets.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(400))*time.Microsecond)
			bg.Add(1)
			go func() {
				defer bg.Done()
				defer cancel()
				body := w.body(r, behave%5, nil) // no Goexit in a Call: keep it simple
				_, err := workerpool.Call(ctx, subs[lane], func(context.Context) (int, error) { body(); return 0, nil })
				r.err = err
				r.gaveUp = err != nil && err == ctx.Err() && err != workerpool.ErrStopped
			}()
		default:
			r := w.newRec(0, "", 3)
			r.callT = w.tickets.Add(1)
			g.Go(func(context.Context) error { w.body(r, 0, nil)(); return nil })
		}
		if rng.IntN(4) == 0 {
			runtime.Gosched()
		}
	}
	if stopAt >= 400 {
		got = append(got, p.Stop())
	}
	stopped.Wait()
	close(stopCtl)
	bg.Wait()
	g.Wait()

	ok := true
	fail := func(format string, args ...any) {
		if ok {
			t.Errorf("round %d (seed %d, max %d):", round, seed, maxW)
		}
		ok = false
		t.Errorf(format, args...)
	}
	// Identify the returned funcs by running them: they record a start.
	w.mu.Lock()
	recs := slices.Clone(w.recs)
	w.mu.Unlock()
	before := make([]int32, len(recs))
	for i, r := range recs {
		before[i] = r.starts.Load()
	}
	var retOrder []*atkRec
	var lists [][]*atkRec
	for _, fs := range got {
		var list []*atkRec
		for _, f := range fs {
			mark := w.startT.Load()
			done := make(chan struct{})
			go func() { // it may panic or call Goexit
				defer close(done)
				defer func() { _ = recover() }()
				f()
			}()
			<-done
			var hit *atkRec
			for _, r := range recs {
				if r.startedAt > mark {
					hit = r
				}
			}
			if hit == nil {
				fail("Stop returned a func that is none of the tasks")
				continue
			}
			hit.returned++
			retOrder = append(retOrder, hit)
			list = append(list, hit)
		}
		lists = append(lists, list)
	}
	if len(w.overlap) > 0 {
		fail("keys overlapped: %v", w.overlap)
	}
	for i, r := range recs {
		started := before[i]
		switch r.kind {
		case 0:
			if r.accepted && int(started)+r.returned != 1 {
				fail("task %d (lane %d key %q): ran %d, returned %d", r.id, r.lane, r.key, started, r.returned)
			}
			if !r.accepted && started+int32(r.returned) != 0 {
				fail("task %d refused (%v) but ran %d / returned %d", r.id, r.err, started, r.returned)
			}
		case 1:
			if (r.err == workerpool.ErrStopped) != (started == 0) || started > 1 {
				fail("SubmitWait %d: err %v, ran %d", r.id, r.err, started)
			}
		case 2:
			var pe *workerpool.PanicError
			if started > 1 || (r.err == nil || errors.As(r.err, &pe)) && started != 1 || r.err == workerpool.ErrStopped && started != 0 {
				fail("Call %d: err %v, ran %d", r.id, r.err, started)
			}
		}
	}
	// Each stop's order: never against a known acceptance order.
	for _, l := range lists {
		for i := range l {
			for j := i + 1; j < len(l); j++ {
				if atkBefore(l[j], l[i]) {
					fail("mode %d: a stop returned task %d before task %d, which was accepted before it", mode, l[i].id, l[j].id)
				}
			}
		}
	}
	// The cut: if X started, every fire-and-forget Y of its lane known to
	// be accepted before it, unkeyed or of X's key, started too.
	for i, x := range recs {
		if before[i] == 0 || mode == 1 {
			continue
		}
		for j, y := range recs {
			if y.kind != 0 || !y.accepted || y.lane != x.lane || !atkBefore(y, x) {
				continue
			}
			if y.key != "" && y.key != x.key {
				continue
			}
			if before[j] == 0 {
				fail("mode %d: task %d (lane %d key %q kind %d) started, but task %d (key %q), accepted before it in its queue, did not (returned %d)", mode, x.id, x.lane, x.key, x.kind, y.id, y.key, y.returned)
			}
		}
	}
	if testing.Verbose() && round < 3 {
		nStarted, nAcc, nGaveUp := 0, 0, 0
		for i, r := range recs {
			if before[i] > 0 {
				nStarted++
			}
			if r.accepted {
				nAcc++
			}
			if r.gaveUp {
				nGaveUp++
			}
		}
		t.Logf("round %d mode %d: max %d, %d recs, %d ff accepted, %d started, %d returned, %d calls gave up, stopAt %d", round, mode, maxW, len(recs), nAcc, nStarted, len(retOrder), nGaveUp, stopAt)
	}
	// Key order: per lane/key, start order never against acceptance.
	for lk, ids := range w.order {
		for i := range ids {
			for j := i + 1; j < len(ids); j++ {
				if atkBefore(recs[ids[j]], recs[ids[i]]) {
					fail("key %s: task %d started before task %d, accepted before it", lk, ids[i], ids[j])
				}
			}
		}
	}
	return ok
}

// ---------------------------------------------------------------------------
// Side probe: tasks their submitters gave up on (Calls whose ctx ended),
// taken from the hand-off buffer by a worker after the give-up and skipped;
// then the Pause and the reaping that follow.

// atkSkipRound runs 200 Calls on four busy workers and ends their shared ctx
// as the workers come free. It returns once every Call has returned and one
// more task has run: nothing is running or waiting.
func atkSkipRound(t *testing.T, p *workerpool.Pool) {
	gate := make(chan struct{})
	for range 4 {
		atkNoErr(t, p.Submit(func() { <-gate }))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var calls sync.WaitGroup
	for range 200 {
		calls.Go(func() { workerpool.Call(ctx, p, func(context.Context) (int, error) { return 0, nil }) })
	}
	for p.Status().Submitted < 204 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	close(gate)
	calls.Wait()
	atkNoErr(t, p.SubmitWait(func() {}))
}

// TestPauseAfterCallsGaveUp: "Pause ... returns once every task handed
// out before it has finished (or ctx is done first)". Nothing runs when it
// is called, so it must return at once, not when its ctx ends.
func TestPauseAfterCallsGaveUp(t *testing.T) {
	for round := range 30 {
		p := workerpool.New(4)
		atkSkipRound(t, p)
		st := p.Status()
		pctx, pcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		p.Pause(pctx)
		took := time.Since(start)
		pcancel()
		p.Stop()
		if took > 150*time.Millisecond {
			t.Fatalf("round %d: Pause took %v with no task running or waiting (Status before it: Busy %d, Waiting %d, Submitted %d, Completed %d, Canceled %d)",
				round, took, st.Busy, st.Waiting, st.Submitted, st.Completed, st.Canceled)
		}
	}
}

// TestIdleWorkersAreReapedAfterCallsGaveUp: "A worker idle for the
// idle timeout exits, between one and two timeouts after it went idle".
func TestIdleWorkersAreReapedAfterCallsGaveUp(t *testing.T) {
	for round := range rounds(30) {
		p := workerpool.New(4, workerpool.WithIdleTimeout(20*time.Millisecond))
		atkSkipRound(t, p)
		time.Sleep(150 * time.Millisecond) // 7.5 timeouts
		st := p.Status()
		p.Stop()
		if st.Workers != 0 {
			t.Fatalf("round %d: %d idle worker(s) still there 7.5 idle timeouts after the last task (Busy %d, Waiting %d, Canceled %d)", round, st.Workers, st.Busy, st.Waiting, st.Canceled)
		}
	}
}

// TestSubpoolStopCutsItsQueueBetweenAPrefixAndTheRest: the cut test
// of cut_test.go, for a sub-pool whose limit does not hold it back (at or
// above the pool's maximum), so that the hand-off buffer holds many of its
// tasks when its Stop takes the buffer back while workers take from it.
// The tasks that start must be a prefix of those it accepted; Stop returns
// the rest, in order.
func TestSubpoolStopCutsItsQueueBetweenAPrefixAndTheRest(t *testing.T) {
	for _, tc := range []struct{ max, limit, spin int }{{4, 4, 0}, {4, 64, 0}, {8, 8, 2000}, {16, 16, 500}} {
		limit := tc.limit
		t.Run(fmt.Sprint(tc.max, "/", tc.limit, "/", tc.spin), func(t *testing.T) {
			for round := range rounds(40) {
				p := workerpool.New(tc.max)
				a := p.Subpool("a", limit)
				const n = 20000
				started := make([]atomic.Int32, n)
				var identify atomic.Bool
				var mu sync.Mutex
				var called []int
				accepted := 0
				done := make(chan struct{})
				go func() {
					defer close(done)
					for i := range n {
						err := a.Submit(func() {
							if identify.Load() {
								mu.Lock()
								called = append(called, i)
								mu.Unlock()
								return
							}
							started[i].Add(1)
							for range tc.spin {
								atkSink.Add(1)
							}
						})
						if err != nil {
							return
						}
						accepted++
					}
				}()
				for a.Status().Completed < 300 {
					runtime.Gosched()
				}
				t0 := time.Now()
				returned := a.Stop()
				t1 := time.Now()
				<-done
				t2 := time.Now()
				identify.Store(true)
				for _, f := range returned {
					f()
				}
				p.Stop()
				t3 := time.Now()
				if t3.Sub(t0) > 500*time.Millisecond {
					t.Logf("round %d: slow: a.Stop %v, submitter %v, p.Stop %v; returned %d, accepted %d; status %+v", round, t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), len(returned), accepted, a.Status())
				}
				ran := 0
				for ran < accepted && started[ran].Load() == 1 {
					ran++
				}
				var late []int
				for i := ran; i < accepted; i++ {
					if started[i].Load() != 0 {
						late = append(late, i)
					}
				}
				if len(late) > 0 {
					t.Fatalf("round %d: task %d did not start (returned: %v), yet later tasks %v started", round, ran, slices.Contains(called, ran), late[:min(len(late), 10)])
				}
				want := make([]int, 0, accepted-ran)
				for i := ran; i < accepted; i++ {
					want = append(want, i)
				}
				if !slices.Equal(called, want) {
					t.Fatalf("round %d: %d of %d started; Stop returned %d tasks, not the rest in order", round, ran, accepted, len(called))
				}
			}
		})
	}
}

var atkSink atomic.Int64

// ---------------------------------------------------------------------------
// Liveness where the loop waits for a worker's report of a task's end: a
// freed key, a sub-pool under its limit again, a sub-pool's Stop. No
// reaping clock runs (a negative idle timeout), so nothing but the report
// can wake the dispatcher.

// TestLeaversDoNotDisturbTheOrderOfTheRest: as
// TestCanceledCallsLeaveKeyedAndUnkeyedOrderIntact, but with no two
// tasks of one key, so that only the leaving is tested: Calls given up, a
// Group and a Map whose contexts end while their tasks wait, mixed with
// keyed and unkeyed tasks of the pool's own queue and of a sub-pool; then
// a Pause takes the buffer back, and Stop. With one worker held, nothing
// runs: Stop returns the fire-and-forget tasks in acceptance order.
func TestLeaversDoNotDisturbTheOrderOfTheRest(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprint("stop=", stop), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1)
				a := p.Subpool("a", 1)
				release := hold(t, p, 1)
				synctest.Wait()
				var l starts
				var order []string
				var bg sync.WaitGroup
				gctx, gcancel := context.WithCancel(context.Background())
				mctx, mcancel := context.WithCancel(context.Background())
				cctx, ccancel := context.WithCancel(context.Background())
				g := p.Group(gctx)
				ff := func(name string, f func(func()) error) {
					atkNoErr(t, f(l.task(name)))
					order = append(order, name)
				}
				call := func(name string, s workerpool.Submitter) {
					bg.Go(func() {
						workerpool.Call(cctx, s, func(context.Context) (int, error) { l.task(name)(); return 0, nil })
					})
					synctest.Wait()
				}
				call("c1", p)
				ff("k1", func(f func()) error { return p.SubmitKey("k1", f) })
				g.Go(func(context.Context) error { l.task("g1")(); return nil })
				ff("u1", p.Submit)
				bg.Go(func() {
					workerpool.Map(mctx, a, []int{1, 2, 3}, func(_ context.Context, i int) (int, error) { l.task(fmt.Sprint("m", i))(); return i, nil })
				})
				synctest.Wait()
				ff("ak1", func(f func()) error { return a.SubmitKey("k1", f) })
				call("c2", a)
				g.Go(func(context.Context) error { l.task("g2")(); return nil })
				ff("a1", a.Submit)
				call("c3", p)
				ff("k2", func(f func()) error { return p.SubmitKey("k2", f) })
				ff("u2", p.Submit)
				ccancel()
				gcancel()
				mcancel()
				synctest.Wait()
				ctx, resume := context.WithCancel(context.Background())
				go p.Pause(ctx)
				synctest.Wait()
				resume()
				synctest.Wait()
				var got []string
				if stop {
					stopped := make(chan []func())
					go func() { stopped <- p.Stop() }()
					synctest.Wait()
					release()
					fs := <-stopped
					if r := l.got(); len(r) != 0 {
						t.Errorf("ran: %v", r)
					}
					for _, f := range fs {
						f()
					}
					got = l.got()
				} else {
					release()
					p.StopWait()
					got = l.got()
				}
				bg.Wait()
				g.Wait()
				if stop {
					if !slices.Equal(got, order) {
						t.Errorf("Stop returned %v, want %v", got, order)
					}
					return
				}
				// Running: turns between the pool's queue and a's. Both had
				// tasks waiting from the start; the pool's queue first.
				want := []string{"k1", "ak1", "u1", "a1", "k2", "u2"}
				if !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			})
		})
	}
}
