package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
)

// The stop hammer: many submitters, every way of submitting, on the pool
// and on a sub-pool, racing each way of stopping the pool (Stop, StopWait,
// Shutdown with a done ctx or a short deadline, Stop during StopWait, all
// at once), on the real scheduler. Every accepted task runs once or comes
// back; every caller that waited hears what became of its task; nothing is
// accepted once the stop returned; no goroutine of the pool is left.

type hammerKind int

// fireAndForget reports whether a kind's accepted tasks, if dropped, must
// come back from Stop.
func (k hammerKind) fireAndForget() bool {
	return k == hSubmit || k == hSubmitCtx || k == hTrySubmit || k == hSubmitKey || k == hLocalSubmit
}

const (
	hSubmit hammerKind = iota
	hSubmitCtx
	hTrySubmit
	hSubmitWait
	hSubmitKey
	hCall
	hCallWith
	hLocalSubmit
	hGo
	hGroupGo
	hMap
	hKinds
)

var hammerNames = [...]string{"Submit", "SubmitContext", "TrySubmit", "SubmitWait", "SubmitKey", "Call", "CallWith", "Local.Submit", "Go", "Group.Go", "Map"}

type hammerRecord struct {
	kind     hammerKind
	sub      bool
	afterRet bool  // the call began after the stop call had returned
	err      error // what the submission (or its waiter) said
	waited   bool  // err is the task's outcome (the call waited for it)
}

type hammer struct {
	p        *workerpool.Pool
	s        *workerpool.Subpool
	local    *workerpool.Local[int]
	ran      []atomic.Int32
	returned []atomic.Int32
	recs     []hammerRecord
	next     atomic.Int64
	// collecting is set while the test runs the tasks Stop returned.
	collecting atomic.Bool
	stopRet    atomic.Bool
}

func (h *hammer) task(id int) func() {
	return func() {
		if h.collecting.Load() {
			h.returned[id].Add(1)
			return
		}
		h.ran[id].Add(1)
	}
}

func (h *hammer) submitOne(kind hammerKind, onSub bool) {
	id := int(h.next.Add(1) - 1)
	if id >= len(h.recs) {
		return
	}
	var to workerpool.Submitter = h.p
	if onSub {
		to = h.s
	}
	rec := hammerRecord{kind: kind, sub: onSub, afterRet: h.stopRet.Load()}
	ctx := context.Background()
	fn := h.task(id)
	switch kind {
	case hSubmit:
		rec.err = to.Submit(fn)
	case hSubmitCtx:
		rec.err = to.SubmitContext(ctx, fn)
	case hTrySubmit:
		rec.err = to.TrySubmit(fn)
	case hSubmitWait:
		rec.err, rec.waited = to.SubmitWait(fn), true
	case hSubmitKey:
		rec.err = to.SubmitKey([]string{"a", "b", "c"}[id%3], fn)
	case hCall:
		_, rec.err = workerpool.Call(ctx, to, func(context.Context) (int, error) { fn(); return 0, nil })
		rec.waited = true
	case hCallWith:
		_, rec.err = workerpool.CallWith(ctx, to, h.local, func(context.Context, int) (int, error) { fn(); return 0, nil })
		rec.waited = true
	case hLocalSubmit:
		rec.err = h.local.Submit(to, func(int) { fn() })
	case hGo:
		_, rec.err = workerpool.Go(to, func() (int, error) { fn(); return 0, nil }).Wait()
		rec.waited = true
	case hGroupGo:
		var g *workerpool.Group
		if onSub {
			g = h.s.Group(ctx)
		} else {
			g = h.p.Group(ctx)
		}
		g.Go(func(context.Context) error { fn(); return nil })
		rec.err, rec.waited = g.Wait(), true
	case hMap:
		_, rec.err = workerpool.Map(ctx, to, []int{0}, func(context.Context, int) (int, error) { fn(); return 0, nil })
		rec.waited = true
	}
	h.recs[id] = rec
}

type stopMode int

const (
	modeStop stopMode = iota
	modeStopWait
	modeShutdownDone
	modeShutdownDeadline
	modeStopDuringStopWait
	modeAllAtOnce
	stopModes
)

var stopModeNames = [...]string{"Stop", "StopWait", "ShutdownDone", "ShutdownDeadline", "StopDuringStopWait", "AllAtOnce"}

// stopPool stops p as mode says, and returns the tasks handed back.
func stopPool(p *workerpool.Pool, mode stopMode) (back []func(), errs []error) {
	switch mode {
	case modeStop:
		back = p.Stop()
	case modeStopWait:
		p.StopWait()
	case modeShutdownDone:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var err error
		back, err = p.Shutdown(ctx)
		errs = append(errs, err)
	case modeShutdownDeadline:
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
		defer cancel()
		var err error
		back, err = p.Shutdown(ctx)
		errs = append(errs, err)
	case modeStopDuringStopWait:
		done := make(chan struct{})
		go func() { p.StopWait(); close(done) }()
		runtime.Gosched()
		back = p.Stop()
		<-done
	case modeAllAtOnce:
		var mu sync.Mutex
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Microsecond)
		defer cancel()
		wg.Go(func() { b := p.Stop(); mu.Lock(); back = append(back, b...); mu.Unlock() })
		wg.Go(func() { p.StopWait() })
		wg.Go(func() {
			b, err := p.Shutdown(ctx)
			mu.Lock()
			back = append(back, b...)
			errs = append(errs, err)
			mu.Unlock()
		})
		wg.Wait()
	}
	return back, errs
}

func runStopHammer(t *testing.T, mode stopMode, workers, submitters int, maxTasks int, r int, kinds []hammerKind, opts ...workerpool.Option) (problems []string, lostLocal int) {
	before := poolGoroutineIDs()
	h := &hammer{
		p:        workerpool.New(workers, append([]workerpool.Option{workerpool.WithPanicHandler(func(pe *workerpool.PanicError) { t.Errorf("panic: %v", pe) })}, opts...)...),
		local:    workerpool.NewLocal(func() (int, error) { return 1, nil }, nil),
		ran:      make([]atomic.Int32, maxTasks),
		returned: make([]atomic.Int32, maxTasks),
		recs:     make([]hammerRecord, maxTasks),
	}
	h.s = h.p.Subpool("s", workers)
	var wg sync.WaitGroup
	var afterCalls atomic.Int64
	for g := range submitters {
		wg.Go(func() {
			for i := 0; ; i++ {
				if h.next.Load() >= int64(maxTasks) {
					return
				}
				kind := kinds[(g+i)%len(kinds)]
				if h.stopRet.Load() {
					if afterCalls.Add(1) > int64(4*submitters*int(hKinds)) {
						return
					}
				}
				h.submitOne(kind, (i+g)%2 == 1)
			}
		})
	}
	// Stop mid-stream.
	for h.next.Load() < int64(maxTasks/8) {
		runtime.Gosched()
	}
	back, errs := stopPool(h.p, mode)
	h.stopRet.Store(true)
	s0 := h.p.Status()
	goroutinesLeft := poolGoroutines(before)
	wg.Wait()
	s1 := h.p.Status()
	// The tasks Stop or Shutdown handed back.
	h.collecting.Store(true)
	for _, f := range back {
		f()
	}
	h.collecting.Store(false)

	n := min(int(h.next.Load()), maxTasks)
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("[%s round %d] ", stopModeNames[mode], r)+fmt.Sprintf(format, args...))
	}
	accepted := 0
	for id := range n {
		rec := h.recs[id]
		ran, ret := h.ran[id].Load(), h.returned[id].Load()
		where := map[bool]string{false: "pool", true: "subpool"}[rec.sub]
		if rec.afterRet && !errors.Is(rec.err, workerpool.ErrStopped) {
			bad("%s on the %s, called after the stop returned, got %v, want ErrStopped (ran %d)", hammerNames[rec.kind], where, rec.err, ran)
		}
		if ran > 1 || ret > 1 || ran+ret > 1 {
			bad("%s task %d ran %d times, returned %d times", hammerNames[rec.kind], id, ran, ret)
		}
		switch {
		case rec.err == nil:
			accepted++
			if mode == modeStopWait && ran != 1 {
				bad("%s task accepted before StopWait, never ran", hammerNames[rec.kind])
			}
			if rec.waited && ran != 1 {
				bad("%s on the %s returned nil but its task ran %d times", hammerNames[rec.kind], where, ran)
			}
			if !rec.waited && ran+ret != 1 {
				if rec.kind == hLocalSubmit {
					lostLocal++
				} else {
					bad("%s on the %s: accepted task neither ran nor came back from Stop (ran %d returned %d)", hammerNames[rec.kind], where, ran, ret)
				}
			}
		case errors.Is(rec.err, workerpool.ErrQueueFull):
			if ran != 0 {
				bad("%s on the %s returned ErrQueueFull but its task ran", hammerNames[rec.kind], where)
			}
		case errors.Is(rec.err, workerpool.ErrStopped):
			if ran != 0 {
				bad("%s on the %s returned ErrStopped but its task ran", hammerNames[rec.kind], where)
			}
		default:
			bad("%s on the %s: unexpected error %v", hammerNames[rec.kind], where, rec.err)
		}
	}
	if s1.Submitted != s0.Submitted {
		bad("Status.Submitted rose after the stop returned: %d -> %d", s0.Submitted, s1.Submitted)
	}
	if s1.Submitted != s1.Completed+s1.Abandoned+s1.Canceled+uint64(s1.Waiting)+uint64(s1.Busy) {
		bad("at rest after the stop: Submitted %d != Completed %d + Abandoned %d + Canceled %d + Waiting %d + Busy %d", s1.Submitted, s1.Completed, s1.Abandoned, s1.Canceled, s1.Waiting, s1.Busy)
	}
	if s0.State != workerpool.Stopped || s0.Workers != 0 || s0.Busy != 0 {
		bad("after the stop returned: State %v Workers %d Busy %d", s0.State, s0.Workers, s0.Busy)
	}
	if len(goroutinesLeft) > 0 {
		// "or has at most its return left to do": look again until such
		// goroutines have had time to run; one that is stuck stays.
		left := goroutinesLeft
		for deadline := time.Now().Add(time.Second); len(left) > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
			left = poolGoroutines(before)
		}
		if len(left) > 0 {
			bad("%d pool goroutines left after the stop returned, e.g.\n%s", len(left), left[0])
		}
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, workerpool.ErrStopped) {
			bad("Shutdown returned %v", err)
		}
	}
	if mode == modeStopWait && s1.Abandoned != 0 {
		bad("StopWait alone abandoned %d tasks", s1.Abandoned)
	}
	_ = accepted
	return problems, lostLocal
}

var allKinds = []hammerKind{hSubmit, hSubmitCtx, hTrySubmit, hSubmitWait, hSubmitKey, hCall, hCallWith, hLocalSubmit, hGo, hGroupGo, hMap}

func TestStopHammer(t *testing.T) {
	stopHammer(t, rounds(6), 24, 6000, allKinds)
}

// Only the submissions that do not wait, at full speed: the window between
// a submitter's check of the pool and its send.
func TestStopHammerFast(t *testing.T) {
	stopHammer(t, rounds(10), 64, 20000, []hammerKind{hSubmit, hSubmit, hSubmit, hSubmitCtx, hTrySubmit, hSubmitKey})
}

// The same on a bounded queue, under each overflow policy.
func TestStopHammerBounded(t *testing.T) {
	for _, o := range []workerpool.Overflow{workerpool.Block, workerpool.Reject, workerpool.CallerRuns} {
		t.Run(o.String(), func(t *testing.T) {
			stopHammer(t, rounds(4), 24, 4000, []hammerKind{hSubmit, hSubmitCtx, hTrySubmit, hSubmitWait, hSubmitKey, hCall, hGo}, workerpool.WithMaxWaiting(4), workerpool.WithOverflow(o))
		})
	}
}

func stopHammer(t *testing.T, rounds, submitters, maxTasks int, kinds []hammerKind, opts ...workerpool.Option) {
	var problems []string
	counts := map[string]int{}
	lost, lostRounds := 0, 0
	for mode := range stopModes {
		for r := range rounds {
			got, lostLocal := runStopHammer(t, mode, 1+r%4, submitters, maxTasks, r, kinds, opts...)
			if len(got) > 0 {
				counts[stopModeNames[mode]]++
			}
			if lostLocal > 0 {
				lost += lostLocal
				lostRounds++
			}
			problems = append(problems, got...)
		}
	}
	seen := map[string]int{}
	for _, pr := range problems {
		key := pr
		if i := strings.Index(pr, "] "); i >= 0 {
			key = pr[i+2:]
		}
		if len(key) > 90 {
			key = key[:90]
		}
		seen[key]++
		if seen[key] <= 2 {
			t.Error(pr)
		}
	}
	if len(problems) > 0 {
		t.Errorf("rounds with problems per mode (of %d): %v", rounds, counts)
	}
	if lost > 0 {
		t.Errorf("%d Local.Submit tasks (in %d of %d rounds) were accepted, then dropped by the stop: not run, not handed back by Stop or Shutdown, reported to no one", lost, lostRounds, rounds*int(stopModes))
	}
}

// TestAStopFinishesWhileSubmittersKeepTryingAStoppedPool: on one P, eight
// goroutines submit to the pool without pause, before and after it stops,
// and each kind of stop must return. A submitter counted itself on its
// way before it looked whether the pool was stopping; preempted between
// the two, it held the count above zero, and with eight of them the loop
// could wait for ever for a moment with none on its way (the hammer test
// below hung once in about 400 stops under -race -cpu 1).
func TestAStopFinishesWhileSubmittersKeepTryingAStoppedPool(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for mode := range stopModes {
		for r := range min(rounds(40), 8) { // one P, spinning: each stop takes a while
			p := workerpool.New(1 + r%2)
			stopSubmitters := spinning(8, func() { _ = p.Submit(func() {}) })
			for p.Status().Completed < 100 {
				runtime.Gosched()
			}
			done := make(chan struct{})
			go func() { stopPool(p, mode); close(done) }()
			ok := waitOrTimeout(done, 10*time.Second) // a guard against a hang, not a measure
			stopSubmitters()
			if !ok {
				t.Fatalf("[%s %d] the stop did not return in 10s beside submitters that keep trying: %s", stopModeNames[mode], r, fmtStatus(p.Status()))
			}
		}
	}
}

// Tasks that call Goexit, and panics whose handler calls Goexit, racing
// every kind of stop: each stop returns, leaves no pool goroutine, and
// Status says Stopped with no worker.
func TestStopRacingGoexitTasks(t *testing.T) {
	for mode := range stopModes {
		for r := range rounds(4) {
			before := poolGoroutineIDs()
			p := workerpool.New(1+r%4, workerpool.WithPanicHandler(func(*workerpool.PanicError) { runtime.Goexit() }))
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						switch (g + i) % 3 {
						case 0:
							_ = p.Submit(func() { runtime.Goexit() })
						case 1:
							_ = p.Submit(func() { panic("x") })
						case 2:
							_ = p.SubmitWait(func() { runtime.Goexit() })
						}
					}
				})
			}
			for p.Status().Completed < 200 {
				runtime.Gosched()
			}
			done := make(chan struct{})
			go func() { stopPool(p, mode); close(done) }()
			if !waitOrTimeout(done, 5*time.Second) {
				close(stop) // so that the test's spinning submitters do not slow all the rest
				wg.Wait()
				t.Fatalf("[%s %d] the stop did not return in 5s; status %+v", stopModeNames[mode], r, p.Status())
			}
			s := p.Status()
			// The submitters go first: spinning on ErrStopped, they can keep
			// a goroutine that has only its return left from running for
			// longer than any grace. One that is stuck stays past a second.
			close(stop)
			wg.Wait()
			left := poolGoroutines(before)
			for deadline := time.Now().Add(time.Second); len(left) > 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
				left = poolGoroutines(before)
			}
			if s.State != workerpool.Stopped || s.Workers != 0 || s.Busy != 0 || len(left) > 0 {
				t.Errorf("[%s %d] after the stop: %v, Workers %d, Busy %d, %d pool goroutines left\n%s", stopModeNames[mode], r, s.State, s.Workers, s.Busy, len(left), strings.Join(left, "\n"))
			}
		}
	}
}
