package workerpool_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// soakTime is how long each soak case hammers its pool. Four cases run, so
// the soak takes about four times this; under -race, a quarter of it
// (rounds(4) is 1 there).
var soakTime = time.Duration(rounds(4)) * time.Second / 4

// A soakTask is the record of one submission in the soak test.
type soakTask struct {
	method   submitMethod
	target   int    // 0 the pool, 1 and 2 its sub-pools
	key      string // for viaSubmitKey
	seq      int    // its place among its submitter's submissions
	panics   bool
	runs     atomic.Int32
	err      error // what the submission returned; written by its submitter
	goexited bool  // the task's Goexit ended its submitter (CallerRuns)
	returned int   // times Stop handed it back; counted at the end
}

// TestSoakEveryTaskRunsOnceUnderRandomControl has many submitters, using
// every way to submit, to the pool and to two sub-pools, with and without
// keys, hammer one pool with tasks that return, yield, sleep,
// panic or call runtime.Goexit, while a controller resizes and pauses the
// pool at random and finally stops it, mid-stream. On the real scheduler and
// clock, with the race detector in CI, it checks that nothing is lost or run
// twice, that the counts add up, that no sub-pool runs more than its limit,
// that tasks with the same key never overlap and start in the order each
// submitter submitted them, and that no goroutine is left. The random seed
// is logged; each case stops the pool in a different way.
func TestSoakEveryTaskRunsOnceUnderRandomControl(t *testing.T) {
	if !longRuns {
		t.Skip("a soak test: it runs for seconds; WORKERPOOL_FULL=1 runs it")
	}
	for _, tc := range []struct {
		name string
		opts []workerpool.Option
		stop func(*workerpool.Pool) []func()
	}{
		{"unbounded/Stop", nil, (*workerpool.Pool).Stop},
		{"block/StopWait", []workerpool.Option{workerpool.WithMaxWaiting(16)},
			func(p *workerpool.Pool) []func() { p.StopWait(); return nil }},
		{"reject/Shutdown", []workerpool.Option{workerpool.WithMaxWaiting(16), workerpool.WithOverflow(workerpool.Reject)},
			func(p *workerpool.Pool) []func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				defer cancel()
				tasks, _ := p.Shutdown(ctx)
				return tasks
			}},
		{"caller-runs/Stop", []workerpool.Option{workerpool.WithMaxWaiting(16), workerpool.WithOverflow(workerpool.CallerRuns)},
			(*workerpool.Pool).Stop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %#x", seed)
			soak(t, seed, tc.opts, tc.stop)
		})
	}
}

func soak(t *testing.T, seed uint64, opts []workerpool.Option, stop func(*workerpool.Pool) []func()) {
	const submitters, maxSize = 128, 8 // more submitters than the dispatcher takes per wake-up (64)
	baseline := runtime.NumGoroutine()
	var handled atomic.Int64
	opts = append([]workerpool.Option{
		workerpool.WithMinWorkers(1),
		workerpool.WithIdleTimeout(time.Millisecond),
		workerpool.WithPanicHandler(func(*workerpool.PanicError) { handled.Add(1) }),
	}, opts...)
	p := workerpool.New(4, opts...)
	limits := [3]int64{0, 2, 3}
	targets := [3]workerpool.Submitter{p, p.Subpool("a", int(limits[1])), p.Subpool("b", int(limits[2]))}
	var subRunning, subPeak [3]atomic.Int64
	var keyMu sync.Mutex
	keyRunning := map[[2]any]int{}  // tasks running per target and key
	lastStarted := map[[3]any]int{} // the last seq started per submitter, target and key
	var keyViolations atomic.Int64

	var running, peak atomic.Int64 // tasks running on workers
	var identifying atomic.Bool
	task := func(sub int, st *soakTask, r *rand.Rand) func() {
		kind := r.IntN(20)
		st.panics = kind == 0
		return func() {
			if identifying.Load() {
				st.returned++
				return
			}
			st.runs.Add(1)
			if onWorker() {
				n := running.Add(1)
				defer running.Add(-1)
				for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
				}
				n = subRunning[st.target].Add(1)
				defer subRunning[st.target].Add(-1)
				for old := subPeak[st.target].Load(); n > old && !subPeak[st.target].CompareAndSwap(old, n); old = subPeak[st.target].Load() {
				}
			}
			if st.method == viaSubmitKey {
				k, order := [2]any{st.target, st.key}, [3]any{sub, st.target, st.key}
				keyMu.Lock()
				keyRunning[k]++
				if keyRunning[k] > 1 || lastStarted[order] > st.seq {
					keyViolations.Add(1)
				}
				lastStarted[order] = st.seq
				keyMu.Unlock()
				defer func() { keyMu.Lock(); keyRunning[k]--; keyMu.Unlock() }()
			}
			switch kind {
			case 0:
				panic("soak")
			case 1:
				runtime.Goexit()
			case 2, 3:
				time.Sleep(time.Duration(r.IntN(50)) * time.Microsecond)
			case 4, 5, 6:
				runtime.Gosched()
			}
		}
	}

	records := make([][]*soakTask, submitters)
	var wg sync.WaitGroup
	for s := range submitters {
		r := rand.New(rand.NewPCG(seed, uint64(s)))
		wg.Go(func() {
			for stopped := false; !stopped; {
				st := &soakTask{method: submitMethod(r.IntN(6)), target: r.IntN(3), seq: len(records[s]) + 1}
				if st.method == viaSubmitKey {
					st.key = string(rune('a' + r.IntN(4)))
				}
				records[s] = append(records[s], st)
				fn := task(s, st, rand.New(rand.NewPCG(r.Uint64(), 0)))
				// Each submission runs in its own goroutine only when
				// the task may end it with Goexit (CallerRuns).
				done := make(chan struct{})
				go func() {
					defer close(done)
					normal := false
					defer func() { st.goexited = !normal }()
					st.err = submitCall(func() error { return soakSubmit(targets[st.target], st, fn, r) })
					normal = true
				}()
				<-done
				stopped = errors.Is(st.err, workerpool.ErrStopped)
			}
		})
	}

	// The controller resizes and pauses the pool at random, then stops it.
	r := rand.New(rand.NewPCG(seed, submitters))
	for end := time.Now().Add(soakTime); time.Now().Before(end); {
		switch r.IntN(3) {
		case 0:
			p.Resize(1 + r.IntN(maxSize))
		case 1:
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(500))*time.Microsecond)
			p.Pause(ctx)
			<-ctx.Done()
			cancel()
		case 2:
			time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
		}
	}
	returned := stop(p)
	wg.Wait()

	// Every goroutine the pool started has exited: the count is back to
	// the baseline, allowing a moment for their deferred returns.
	for deadline := time.Now().Add(time.Second); runtime.NumGoroutine() > baseline && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), baseline, "goroutines left after the pool stopped")

	identifying.Store(true)
	for _, fn := range returned {
		fn()
	}
	var total, accepted, ran, waitStopped, rejected, ffPanics uint64
	for _, recs := range records {
		for _, st := range recs {
			total++
			runs := st.runs.Load()
			ran += uint64(runs)
			isPanic := errors.As(st.err, new(*workerpool.PanicError))
			ok := st.err == nil || st.goexited || isPanic
			switch {
			case ok && st.method == viaSubmitWait:
				require.Equal(t, int32(1), runs, "a SubmitWait that returned %v ran its task %d times", st.err, runs)
				require.Zero(t, st.returned, "Stop returned a SubmitWait task")
			case ok:
				require.Equal(t, 1, int(runs)+st.returned, "an accepted task ran %d times and was returned %d times", runs, st.returned)
			default:
				require.Zero(t, runs+int32(st.returned), "a task refused with %v ran or was returned", st.err)
				switch {
				case st.err == workerpool.ErrQueueFull:
					rejected++
				case errors.Is(st.err, workerpool.ErrStopped) && st.method == viaSubmitWait:
					waitStopped++
				case errors.Is(st.err, workerpool.ErrStopped), errors.Is(st.err, context.Canceled), errors.Is(st.err, context.DeadlineExceeded):
				default:
					t.Fatalf("%v returned %v", st.method, st.err)
				}
			}
			if ok {
				accepted++
			}
			if ok && st.panics && st.method != viaSubmitWait && runs == 1 {
				ffPanics++
			}
		}
	}
	s := p.Status()
	t.Logf("%d submissions, %d accepted, %d ran, %d returned by Stop, %d rejected; peak %d running, %d waiting",
		total, accepted, ran, len(returned), rejected, peak.Load(), s.PeakWaiting)
	assert.LessOrEqual(t, peak.Load(), int64(maxSize), "never more tasks on workers than the largest maximum")
	for i := 1; i < 3; i++ {
		assert.LessOrEqual(t, subPeak[i].Load(), limits[i], "sub-pool %d ran more than its limit", i)
		ss := targets[i].(*workerpool.Subpool).Status()
		assert.Equal(t, ss.Submitted, ss.Completed+ss.Abandoned, "sub-pool %d at rest: %+v", i, ss)
	}
	assert.Zero(t, keyViolations.Load(), "tasks with the same key overlapped or started out of order")
	assert.Equal(t, workerpool.Stopped, s.State)
	assert.Zero(t, s.Workers)
	assert.Equal(t, s.Submitted, s.Completed+s.Abandoned, "at rest after stopping: %+v", s)
	assert.Equal(t, ran, s.Completed)
	assert.Equal(t, rejected, s.Rejected)
	assert.Equal(t, ffPanics, uint64(handled.Load()), "the panic handler saw every fire-and-forget panic")
	droppedWaiters := s.Submitted - accepted
	assert.LessOrEqual(t, droppedWaiters, waitStopped, "Submitted = %d, %d accepted", s.Submitted, accepted)
	assert.Equal(t, uint64(len(returned))+droppedWaiters, s.Abandoned)
}

// soakSubmit submits fn to p by st.method.
func soakSubmit(p workerpool.Submitter, st *soakTask, fn func(), r *rand.Rand) error {
	switch st.method {
	case viaSubmitKey:
		return p.SubmitKey(st.key, fn)
	case viaSubmit:
		return p.Submit(fn)
	case viaSubmitWait:
		return p.SubmitWait(fn)
	case viaTrySubmit:
		return p.TrySubmit(fn)
	case viaSubmitCtxDone:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return p.SubmitContext(ctx, fn)
	default:
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(100))*time.Microsecond)
		defer cancel()
		return p.SubmitContext(ctx, fn)
	}
}
