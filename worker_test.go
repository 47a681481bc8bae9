package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests of running a task on a worker: panics and runtime.Goexit, in
// the task and in the panic handler, cost no capacity and keep the counts;
// a panic goes to the task's waiter as a *PanicError, or to the panic
// handler; a panic in the handler ends the program.

func TestPanicsAndGoexitKeepFullCapacity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		task     func()
		panicked uint64 // of the 51 tasks
	}{
		{"panic", func() { panic("boom") }, 51},
		{"Goexit", runtime.Goexit, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const max = 3
				p := workerpool.New(max, workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
				for range 50 {
					require.NoError(t, p.Submit(tc.task))
				}
				err := p.SubmitWait(tc.task)
				if tc.panicked > 0 {
					assert.ErrorAs(t, err, new(*workerpool.PanicError))
				} else {
					assert.NoError(t, err, "a task that calls Goexit counts as returned")
				}
				synctest.Wait()

				release := hold(t, p, max+1)
				synctest.Wait()
				s := p.Status()
				assert.Equal(t, max, s.Workers, "the pool still has all its workers")
				assert.Equal(t, max, s.Busy, "and all of them run tasks")
				assert.Equal(t, 1, s.Waiting)
				release()
				p.StopWait() // the bubble fails the test if a goroutine is left
				s = p.Status()
				assert.Equal(t, uint64(51+max+1), s.Completed)
				assert.Equal(t, tc.panicked, s.Panicked)
				assertBalanced(t, s)
			})
		})
	}
}

func TestSubmitWaitReportsAPanicAsPanicError(t *testing.T) {
	p := workerpool.New(1, workerpool.WithPanicHandler(func(*workerpool.PanicError) { t.Error("a SubmitWait panic goes to its caller, not the handler") }))
	defer p.Stop()
	err := p.SubmitWait(func() { panic(io.EOF) })
	var pe *workerpool.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, io.EOF, pe.Value)
	assert.ErrorIs(t, err, io.EOF, "errors.Is reaches a panicked error value")
	assert.Contains(t, string(pe.Stack), "TestSubmitWaitReportsAPanicAsPanicError")
	assert.Equal(t, "workerpool: task panicked: EOF", err.Error())

	err = p.SubmitWait(func() { panic("not an error") })
	require.ErrorAs(t, err, &pe)
	assert.Nil(t, pe.Unwrap())
	assert.Equal(t, uint64(2), p.Status().Panicked)
}

func TestPanicHandlerGetsFireAndForgetPanics(t *testing.T) {
	got := make(chan *workerpool.PanicError, 1)
	p := workerpool.New(1, workerpool.WithPanicHandler(func(pe *workerpool.PanicError) { got <- pe }))
	require.NoError(t, p.Submit(func() { panic("boom") }))
	pe := <-got
	p.StopWait()
	assert.Equal(t, "boom", pe.Value)
	assert.NotEmpty(t, pe.Stack)
}

func TestPanicHandlerThatCallsGoexitKeepsTheAccounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// t.Fatal in a handler calls runtime.Goexit.
		p := workerpool.New(1, workerpool.WithPanicHandler(func(*workerpool.PanicError) { runtime.Goexit() }))
		for range 3 {
			require.NoError(t, p.Submit(func() { panic("boom") }))
		}
		synctest.Wait()
		s := p.Status()
		assert.Equal(t, workerpool.Status{Workers: 1, Busy: 0, Idle: 1}, pick(s), "the worker is idle again")
		assert.Equal(t, uint64(3), s.Completed)
		assert.Equal(t, uint64(3), s.Panicked)

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		p.Pause(ctx)
		assert.Zero(t, time.Since(start), "Pause finds no task running")
		cancel()
		require.NoError(t, p.SubmitWait(func() {}), "the pool keeps working")
		p.StopWait()
	})
}

// A keyed or sub-pool task that panics or calls runtime.Goexit frees its
// key and its place under the sub-pool's limit like any other, whether the
// panic handler returns or itself calls runtime.Goexit: the next task with
// its key runs, and the sub-pool's Status counts it.
func TestAPanicOrGoexitFreesItsKeyAndItsPlace(t *testing.T) {
	for _, handler := range []struct {
		name string
		h    func(*workerpool.PanicError)
	}{
		{"handler returns", func(*workerpool.PanicError) {}},
		{"handler calls Goexit", func(*workerpool.PanicError) { runtime.Goexit() }},
	} {
		t.Run(handler.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testAPanicOrGoexitFreesItsKeyAndItsPlace(t, handler.h) })
		})
	}
}

func testAPanicOrGoexitFreesItsKeyAndItsPlace(t *testing.T, handler func(*workerpool.PanicError)) {
	p := workerpool.New(2, workerpool.WithPanicHandler(handler))
	s := p.Subpool("s", 1)
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	for _, to := range []workerpool.Submitter{p, s} {
		k := fmt.Sprintf("%T", to)
		require.NoError(t, to.SubmitKey(k, func() { note(k + " panics"); panic("boom") }))
		require.NoError(t, to.SubmitKey(k, func() { note(k + " exits"); runtime.Goexit() }))
		require.NoError(t, to.SubmitKey(k, func() { note(k + " runs") }))
	}
	require.NoError(t, s.Submit(func() { panic("unkeyed") }))
	require.NoError(t, s.Submit(func() { runtime.Goexit() }))
	require.NoError(t, s.SubmitWait(func() {}), "the sub-pool's one place is free again")
	p.StopWait()
	for _, k := range []string{"*workerpool.Pool", "*workerpool.Subpool"} {
		i := index(order, k+" panics")
		require.GreaterOrEqual(t, i, 0, order)
		assert.Less(t, i, index(order, k+" exits"))
		assert.Less(t, index(order, k+" exits"), index(order, k+" runs"))
	}
	st := s.Status()
	assert.Equal(t, uint64(6), st.Completed)
	assert.Equal(t, uint64(2), st.Panicked)
	assert.Zero(t, st.Busy)
	assert.Equal(t, uint64(3), p.Status().Panicked, "the pool counts every panic")
	ps := p.Status()
	assert.Equal(t, ps.Submitted, ps.Completed, "at rest: %+v", ps)
	assert.Zero(t, ps.Workers, "no worker left")
}

// crashEnv names the environment variable that makes the test binary run
// one of the crashing programs below instead of the tests.
const crashEnv = "WORKERPOOL_CRASH_CHILD"

// crashHandler is the panic handler of the crash programs: it says it was
// called, then panics.
func crashHandler(pe *workerpool.PanicError) {
	fmt.Fprintln(os.Stderr, "handler called")
	panic(fmt.Sprint("handler: ", pe.Value))
}

// crashPrograms are programs whose only correct outcome is a crash.
var crashPrograms = map[string]func(){
	"handler panics on a worker": func() {
		p := workerpool.New(1, workerpool.WithPanicHandler(crashHandler))
		_ = p.Submit(func() { panic("task") })
		p.StopWait()
	},
	"handler panics on a failed open": func() {
		p := workerpool.New(1, workerpool.WithPanicHandler(crashHandler))
		x := workerpool.NewLocal(func() (int, error) { return 0, errors.New("task's state failed to open") }, nil)
		_ = x.Submit(p, func(int) {})
		p.StopWait()
	},
	"handler panics under CallerRuns": func() {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns),
			workerpool.WithPanicHandler(crashHandler))
		block := make(chan struct{})
		_ = p.Submit(func() { <-block })
		_ = p.Submit(func() { <-block })
		for p.WaitingQueueSize() != 1 {
			runtime.Gosched()
		}
		func() {
			defer func() { recover() }() // the caller must not be able to stop the crash
			_ = p.Submit(func() { panic("task") })
		}()
		close(block)
		p.StopWait()
	},
}

func TestMain(m *testing.M) {
	if name := os.Getenv(crashEnv); name != "" {
		crashPrograms[name]()
		os.Exit(0) // not reached if the program crashed as it should
	}
	os.Exit(m.Run())
}

func TestAPanickingPanicHandlerCrashesTheProgram(t *testing.T) {
	for name := range crashPrograms {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashEnv+"="+name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the program did not crash:\n%s", out)
			assert.Equal(t, 2, exit.ExitCode(), "an unrecovered panic exits with status 2")
			assert.Contains(t, string(out), "panic: ")
			assert.Contains(t, string(out), "handler: task")
			assert.Equal(t, 1, strings.Count(string(out), "handler called"), "the handler is called once:\n%s", out)
		})
	}
}

func TestACallerRunsTaskWhoseHandlerCallsGoexitEndsOnlyItsSubmitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns),
			workerpool.WithPanicHandler(func(*workerpool.PanicError) { runtime.Goexit() }))
		block := make(chan struct{})
		for range 2 { // one running, one waiting: the queue is full
			require.NoError(t, p.Submit(func() { <-block }))
		}
		synctest.Wait()
		returned := make(chan bool, 1)
		go func() {
			defer func() { returned <- false }() // runs on Goexit too
			_ = p.Submit(func() { panic("boom") })
			returned <- true
		}()
		synctest.Wait()
		assert.False(t, <-returned, "the handler's Goexit ended the submitting goroutine")
		s := p.Status()
		assert.Equal(t, uint64(3), s.Submitted)
		assert.Equal(t, uint64(1), s.Completed, "the caller-run task counts as completed")
		assert.Equal(t, uint64(1), s.Panicked)
		close(block)
		p.StopWait()
		s = p.Status()
		assert.Equal(t, s.Submitted, s.Completed+s.Abandoned+uint64(s.Waiting)+uint64(s.Busy), "balanced: %+v", s)
	})
}

// ---------------------------------------------------------------------------
// Stops from inside: Stop, StopWait and Shutdown called by one of the
// pool's own workers do not wait for that worker, which exits once it
// returns to the pool. They used to wait for it, and so for ever: a panic
// handler that called Stop hung, and so did every Stop after it.

// stopFromInside is how a worker may stop its own pool.
var stopFromInside = []struct {
	name string
	stop func(p *workerpool.Pool) (dropped int, err error)
}{
	{"Stop", func(p *workerpool.Pool) (int, error) { return len(p.Stop()), nil }},
	{"StopWait", func(p *workerpool.Pool) (int, error) { p.StopWait(); return 0, nil }},
	{"Shutdown", func(p *workerpool.Pool) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		left, err := p.Shutdown(ctx)
		return len(left), err
	}},
}

// TestAPanicHandlerCanStopItsPool: the handler of a task's panic stops the
// pool, of one worker, with a task queued behind: the call returns, the
// queued task runs (StopWait, Shutdown) or is returned (Stop), and a Stop
// from outside returns too, with every goroutine gone.
func TestAPanicHandlerCanStopItsPool(t *testing.T) {
	for _, how := range stopFromInside {
		t.Run(how.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var p *workerpool.Pool
				returned := make(chan int, 1)
				p = workerpool.New(1, workerpool.WithPanicHandler(func(*workerpool.PanicError) {
					n, err := how.stop(p)
					assert.NoError(t, err)
					returned <- n
				}))
				var ran atomic.Bool
				queued := make(chan struct{})
				require.NoError(t, p.Submit(func() { <-queued; panic("stop the pool") }))
				require.NoError(t, p.Submit(func() { ran.Store(true) }))
				close(queued)
				dropped := <-returned // the handler's stop returned
				assert.NotEqual(t, ran.Load(), dropped == 1, "the queued task ran, or the stop returned it")
				p.Stop()
				synctest.Wait()
				s := p.Status()
				assert.Equal(t, workerpool.Stopped, s.State)
				assert.Zero(t, s.Workers, "the handler's worker exited once the handler returned")
				assertBalanced(t, s)
			})
		})
	}
}

// TestATaskCanStopItsPool: a task stops its pool, of one worker, with tasks
// queued behind it. StopWait and Shutdown run them, on a worker started in
// place of the one that waits, Stop returns them; each returns once the
// others have ended, and the task goes on: its pool is stopped.
func TestATaskCanStopItsPool(t *testing.T) {
	for _, how := range stopFromInside {
		t.Run(how.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1)
				var ran atomic.Int32
				after := make(chan workerpool.Status, 1)
				queued := make(chan struct{})
				var dropped int
				require.NoError(t, p.Submit(func() {
					<-queued // the tasks behind it are in the queue
					var err error
					dropped, err = how.stop(p)
					assert.NoError(t, err)
					after <- p.Status()
				}))
				for range 3 {
					require.NoError(t, p.Submit(func() { ran.Add(1) }))
				}
				close(queued)
				s := <-after
				assert.Equal(t, workerpool.Stopped, s.State, "once the stop returned")
				assert.Equal(t, int32(3), ran.Load()+int32(dropped), "each queued task ran or was returned")
				if how.name != "Stop" {
					assert.Equal(t, int32(3), ran.Load(), "%s runs the queue", how.name)
				}
				assert.ErrorIs(t, p.Submit(func() {}), workerpool.ErrStopped)
				synctest.Wait()
				assert.Zero(t, p.Status().Workers, "the worker exits once its task returns")
			})
		})
	}
}

// TestATaskOfARestartedWorkerCanStopItsPool: after a task calls
// runtime.Goexit, its worker goes on in a new goroutine, which a stop
// from inside must know as the pool's too.
func TestATaskOfARestartedWorkerCanStopItsPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		require.NoError(t, p.SubmitWait(runtime.Goexit))
		stopped := make(chan struct{})
		require.NoError(t, p.Submit(func() { p.Stop(); close(stopped) }))
		<-stopped
		synctest.Wait()
		assert.Zero(t, p.Status().Workers)
	})
}

// TestAStopFromAnotherPoolsTaskWaitsForThisPool: a task of pool q stops
// pool p, one of whose tasks runs: the stop must wait for it, as from
// anywhere but p's own workers.
func TestAStopFromAnotherPoolsTaskWaitsForThisPool(t *testing.T) {
	for _, how := range stopFromInside {
		t.Run(how.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, q := workerpool.New(1), workerpool.New(1)
				defer q.StopWait()
				var ended atomic.Bool
				require.NoError(t, p.Submit(func() { time.Sleep(time.Second); ended.Store(true) }))
				synctest.Wait()
				returned := make(chan bool, 1)
				require.NoError(t, q.Submit(func() {
					_, _ = how.stop(p)
					returned <- ended.Load()
				}))
				assert.True(t, <-returned, "p's stop returned before p's task ended")
			})
		})
	}
}
