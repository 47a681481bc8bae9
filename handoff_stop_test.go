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
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests in this file stop a pool, or a sub-pool, while its workers take
// tasks from the hand-off buffer as fast as they can, on the real scheduler,
// so that workers and the dispatcher really do race for the buffer's tasks.
// Their assertions hold for every interleaving: the tasks that start are a
// prefix of each queue's accepted ones, and the stop returns the rest, in
// order; nothing is lost or run twice.

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

// TestSubpoolStopCutsItsQueueBetweenAPrefixAndTheRest: the test above,
// for a sub-pool whose limit does not hold it back (at or
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

// A7. Sub-pool tasks fill the hand-off buffer (limit at the pool's
// maximum) while workers take them, and the pool's Stop, the sub-pool's
// Stop and a Resize race: nothing is lost (every accepted task ran or was
// returned by exactly one Stop), the sub-pool's Stop returns, and its
// limit holds.
func TestStopsRacingForASubpoolsBufferedTasksLoseNothing(t *testing.T) {
	bad := 0
	const rounds = 300
	for round := range rounds {
		const maxW = 3
		p := workerpool.New(maxW)
		limit := maxW
		if round%2 == 1 {
			limit = 2
		}
		sub := p.Subpool("s", limit)
		other := p.Subpool("o", 1)
		var w peakCounter
		var ran atomic.Int64
		accepted := 0
		for i := range 100 {
			fn := func() {
				w.enter()
				ran.Add(1)
				runtime.Gosched()
				w.leave()
			}
			if sub.Submit(fn) == nil {
				accepted++
			}
			if i%10 == 0 {
				other.Submit(func() { runtime.Gosched() })
			}
		}
		var fromPool, fromSub []func()
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); fromPool = p.Stop() }()
		subDone := make(chan struct{})
		go func() {
			defer wg.Done()
			defer close(subDone)
			if round%4 >= 2 {
				sub.StopWait()
			} else {
				fromSub = sub.Stop()
			}
		}()
		go func() { defer wg.Done(); p.Resize(1 + round%maxW) }()
		select {
		case <-subDone:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Subpool.Stop did not return", round)
		}
		wg.Wait()
		// fromPool holds the other sub-pool's dropped tasks too: count ours.
		for _, f := range fromPool {
			f()
		}
		// (running the dropped tasks above counted them in ran too)
		total := int(ran.Load()) + len(fromSub)
		if total != accepted {
			bad++
			if bad <= 3 {
				t.Errorf("round %d: accepted %d, ran+returned %d (returned by pool.Stop %d, by sub.Stop %d)", round, accepted, total, len(fromPool), len(fromSub))
			}
		}
		if int(w.peak.Load()) > limit {
			t.Errorf("round %d: %d ran at once, limit %d", round, w.peak.Load(), limit)
		}
		ss := sub.Status()
		if !balanced(ss) {
			t.Errorf("round %d: sub-pool not balanced: %s", round, fmtStatus(ss))
		}
	}
	if bad > 0 {
		t.Errorf("%d/%d rounds lost or duplicated tasks", bad, rounds)
	}
}

// ---------------------------------------------------------------------------
// Stop's cut and the order it returns, under churn: pauses, resizes, keys,
// SubmitWaits, Calls that give up, Group tasks and nested submissions, and a
// Stop racing a Shutdown past its deadline or a sub-pool's Stop.

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
	mode := rng.IntN(4) // 0 Stop; 1 Stop racing a Shutdown past its deadline; 2 Stop racing a sub-pool's Stop and another's StopWait; 3 a Shutdown whose deadline passes as tasks run
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
			if mode == 3 {
				deadline := time.Duration(100+rng.IntN(400)) * time.Microsecond
				stopped.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					fs, _ := p.Shutdown(ctx)
					keep(fs)
				})
			} else {
				stopped.Go(func() { keep(p.Stop()) })
			}
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
				r.gaveUp = err != nil && err == ctx.Err() && !errors.Is(err, workerpool.ErrStopped)
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
			if errors.Is(r.err, workerpool.ErrStopped) != (started == 0) || started > 1 {
				fail("SubmitWait %d: err %v, ran %d", r.id, r.err, started)
			}
		case 2:
			var pe *workerpool.PanicError
			if started > 1 || (r.err == nil || errors.As(r.err, &pe)) && started != 1 || errors.Is(r.err, workerpool.ErrStopped) && started != 0 {
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
