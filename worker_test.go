package workerpool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
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

// noRecoveryPrograms are programs whose task panics in a pool made with
// WithoutPanicRecovery.
var noRecoveryPrograms = map[string]func(){
	"on a worker": func() {
		p := workerpool.New(1, workerpool.WithoutPanicRecovery())
		_ = p.Submit(taskThatPanics)
		p.StopWait()
	},
	"in a SubmitWait": func() {
		p := workerpool.New(1, workerpool.WithoutPanicRecovery())
		_ = p.SubmitWait(taskThatPanics)
		p.StopWait()
	},
}

func taskThatPanics() { panic("boom from the task") }

func TestMain(m *testing.M) {
	if name := os.Getenv(crashEnv); name != "" {
		if f, ok := noRecoveryPrograms[name]; ok {
			f()
		} else {
			crashPrograms[name]()
		}
		os.Exit(0) // not reached if the program crashed as it should
	}
	os.Exit(m.Run())
}

// TestWithoutPanicRecoveryATasksPanicCrashesTheProgramWithItsStack: with
// WithoutPanicRecovery, a task's panic is not recovered: the program
// crashes with the panic's value and the task's own frames, as without a
// pool, whether or not a SubmitWait waits for it.
func TestWithoutPanicRecoveryATasksPanicCrashesTheProgramWithItsStack(t *testing.T) {
	for name := range noRecoveryPrograms {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashEnv+"="+name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the program did not crash:\n%s", out)
			assert.Equal(t, 2, exit.ExitCode())
			assert.Contains(t, string(out), "panic: boom from the task")
			assert.Contains(t, string(out), "workerpool_test.taskThatPanics", "the task's own frame")
			assert.NotContains(t, string(out), "PanicError")
		})
	}
}

// TestWithoutPanicRecoveryACallerRunsPanicReachesTheSubmitter: under
// CallerRuns the task runs in its submitter, so its panic goes up to the
// caller of Submit, which may recover it; the pool goes on.
func TestWithoutPanicRecoveryACallerRunsPanicReachesTheSubmitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithoutPanicRecovery(), workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
		block := make(chan struct{})
		for range 2 { // one running, one waiting: the queue is full
			require.NoError(t, p.Submit(func() { <-block }))
		}
		synctest.Wait()
		var got any
		func() {
			defer func() { got = recover() }()
			_ = p.Submit(taskThatPanics)
		}()
		assert.Equal(t, "boom from the task", got)
		close(block)
		p.StopWait()
		assert.Equal(t, workerpool.Stopped, p.Status().State)
	})
}

// TestWithLoggerTheDefaultHandlerLogsThere: the default panic handler logs
// a task's panic, with its stack, to the logger WithLogger gives.
func TestWithLoggerTheDefaultHandlerLogsThere(t *testing.T) {
	var buf bytes.Buffer
	p := workerpool.New(1, workerpool.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	require.NoError(t, p.Submit(taskThatPanics))
	p.StopWait()
	assert.Contains(t, buf.String(), "level=ERROR")
	assert.Contains(t, buf.String(), `msg="workerpool: task panicked" panic="boom from the task"`)
	assert.Contains(t, buf.String(), "taskThatPanics", "the stack")
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
// the place the one that waits lends, Stop returns them; each returns once
// the others have ended, and the task goes on: its pool is Stopping until
// the task ends, and then Stopped (break 3 of issue 35: the pool said
// Stopped while the task still ran).
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
				assert.Equal(t, workerpool.Stopping, s.State, "once the stop returned: its own task still runs")
				assert.Equal(t, 1, s.Busy, "the stopper's task")
				assert.Equal(t, int32(3), ran.Load()+int32(dropped), "each queued task ran or was returned")
				if how.name != "Stop" {
					assert.Equal(t, int32(3), ran.Load(), "%s runs the queue", how.name)
				}
				assert.ErrorIs(t, p.Submit(func() {}), workerpool.ErrStopped)
				synctest.Wait()
				s = p.Status()
				assert.Zero(t, s.Workers, "the worker exits once its task returns")
				assert.Equal(t, workerpool.Stopped, s.State, "the State doc: Stopped once every goroutine the pool started has exited")
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

// waitFromInside is how a worker may stop its own pool and wait for its
// queue: with no deadline, so that only the pool can end the wait.
var waitFromInside = []struct {
	name string
	stop func(p *workerpool.Pool) (dropped []func(), err error)
}{
	{"StopWait", func(p *workerpool.Pool) ([]func(), error) { p.StopWait(); return nil, nil }},
	{"Shutdown", func(p *workerpool.Pool) ([]func(), error) { return p.Shutdown(context.Background()) }},
}

// TestAStopFromATaskDropsTheTasksOnlyItsKeyHoldsBack: a task of a sub-pool
// of limit 1, or a keyed task, waits in StopWait or Shutdown with tasks of
// its sub-pool or key queued behind it. The stopper lends its sub-pool's
// place, so those of its sub-pool run in it; those of its key can never
// start: the pool drops them, as Stop would, rather than wait for ever.
// Tasks of another key run; a SubmitWait whose task is dropped returns
// ErrStopped, Shutdown returns the fire-and-forget ones with ErrStopped,
// and Status counts them Abandoned. These calls used to wait for ever.
func TestAStopFromATaskDropsTheTasksOnlyItsKeyHoldsBack(t *testing.T) {
	for _, how := range waitFromInside {
		for _, keyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keyed=%v", how.name, keyed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := workerpool.New(4)
					s := p.Subpool("s", 1)
					submit := s.Submit
					if keyed {
						s = p.Subpool("s4", 4)
						submit = func(f func()) error { return s.SubmitKey("k", f) }
					}
					var ran, otherKey atomic.Int32
					type result struct {
						dropped []func()
						err     error
					}
					returned := make(chan result, 1)
					gate := make(chan struct{})
					require.NoError(t, submit(func() {
						<-gate // the tasks behind it are queued
						dropped, err := how.stop(p)
						returned <- result{dropped, err}
					}))
					for range 2 {
						require.NoError(t, submit(func() { ran.Add(1) }))
					}
					waited := make(chan error, 1)
					if keyed { // no SubmitWait takes a key
						require.NoError(t, submit(func() { ran.Add(1) }))
					} else {
						go func() { waited <- s.SubmitWait(func() { ran.Add(1) }) }()
					}
					if keyed {
						for range 3 {
							require.NoError(t, s.SubmitKey("j", func() { otherKey.Add(1) }))
						}
					}
					synctest.Wait() // all queued
					close(gate)
					r := <-returned
					if !keyed {
						assert.Equal(t, int32(3), ran.Load(), "the tasks behind the stopper ran in the place it lent")
						assert.NoError(t, <-waited)
						assert.NoError(t, r.err)
						p.Stop()
						st := p.Status()
						assert.Zero(t, st.Abandoned)
						assertBalanced(t, st)
						return
					}
					assert.Zero(t, ran.Load(), "a task held back by the stopper's key started")
					if how.name == "Shutdown" {
						assert.Len(t, r.dropped, 3, "Shutdown returns the dropped fire-and-forget tasks")
						assert.ErrorIs(t, r.err, workerpool.ErrStopped)
					}
					assert.Equal(t, int32(3), otherKey.Load(), "another key's tasks run")
					p.Stop() // from outside: it returns too
					st := p.Status()
					assert.Equal(t, uint64(3), st.Abandoned)
					assertBalanced(t, st)
				})
			})
		}
	}
}

// TestAStopFromATaskDropsNothingAnotherTaskWillFree: the same with a
// sub-pool of limit 2, whose other place a slow task holds: once it ends,
// the queued tasks run, one at a time, in the place it frees. None is
// dropped, also when the other task ends just as the stop comes.
func TestAStopFromATaskDropsNothingAnotherTaskWillFree(t *testing.T) {
	for _, how := range waitFromInside {
		t.Run(how.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(4)
				s := p.Subpool("s", 2)
				var ran atomic.Int32
				returned := make(chan []func(), 1)
				gate := make(chan struct{})
				require.NoError(t, s.Submit(func() { time.Sleep(time.Second) }))
				require.NoError(t, s.Submit(func() {
					<-gate
					dropped, err := how.stop(p)
					assert.NoError(t, err)
					returned <- dropped
				}))
				for range 3 {
					require.NoError(t, s.Submit(func() { ran.Add(1) }))
				}
				synctest.Wait()
				close(gate)
				assert.Empty(t, <-returned)
				assert.Equal(t, int32(3), ran.Load(), "the tasks ran in the place the slow task freed")
				p.Stop()
				assert.Zero(t, p.Status().Abandoned)
			})
		})
	}
	// On the real scheduler the other task ends just as the stop comes:
	// its end counted before it is reported must not look like the last.
	t.Run("racing", func(t *testing.T) {
		for round := range 2000 {
			p := workerpool.New(4)
			s := p.Subpool("s", 2)
			var ran atomic.Int32
			gate, stopped := make(chan struct{}), make(chan struct{})
			require.NoError(t, s.Submit(func() {
				<-gate
				for range round % 50 {
					runtime.Gosched()
				}
			}))
			require.NoError(t, s.Submit(func() { <-gate; p.StopWait(); close(stopped) }))
			for range 3 {
				require.NoError(t, s.Submit(func() { ran.Add(1) }))
			}
			close(gate)
			<-stopped
			p.StopWait()
			require.Equal(t, int32(3), ran.Load(), "round %d: ran", round)
			require.Zero(t, p.Status().Abandoned, "round %d", round)
		}
	})
}

// TestAStrandedQueueIsDroppedOnceAPanicHandlerGoexits: a keyed task waits
// in StopWait with its key's tasks behind, while another task's panic
// handler runs: its worker is not free, so the loop cannot yet tell that
// the key's tasks are stranded. The handler then calls runtime.Goexit; the
// worker goes on in a new goroutine, free, and the loop must hear of it:
// with no reaping clock to wake it, it would wait for ever. On the real
// scheduler, the handler leaving at varied moments.
func TestAStrandedQueueIsDroppedOnceAPanicHandlerGoexits(t *testing.T) {
	for round := range 500 {
		inHandler, leave := make(chan struct{}), make(chan struct{})
		p := workerpool.New(3, workerpool.WithIdleTimeout(-1), workerpool.WithPanicHandler(func(*workerpool.PanicError) {
			close(inHandler)
			<-leave
			runtime.Goexit()
		}))
		queued, stopped := make(chan struct{}), make(chan struct{})
		var ran atomic.Int32
		require.NoError(t, p.Submit(func() { panic("to the handler") }))
		<-inHandler
		require.NoError(t, p.SubmitKey("k", func() { <-queued; p.StopWait(); close(stopped) }))
		require.NoError(t, p.SubmitKey("k", func() { ran.Add(1) }))
		close(queued)
		for range round % 20 {
			runtime.Gosched()
		}
		close(leave)
		select {
		case <-stopped:
		case <-time.After(10 * time.Second): // a guard against a hang, not a measure
			t.Fatalf("round %d: the stranded queue was never dropped", round)
		}
		require.Zero(t, ran.Load())
		require.Equal(t, uint64(1), p.Status().Abandoned)
	}
}

// deep calls f n frames down, so that a stack trace of f's callees is cut
// in the middle.
//
//go:noinline
func deep(n int, f func()) int {
	if n == 0 {
		f()
		return 0
	}
	return deep(n-1, f) + 1
}

// TestAStrandedQueueIsDroppedWhateverTheStoppersStacks: a keyed task waits
// in StopWait with its key's tasks behind it, beside a panic handler that
// calls StopWait deep in its stack, for a task that panicked deep in its
// own (the trace then cuts out the middle frames), or beside a task that
// calls StopWait from the task observer or the panic handler of another
// pool that ran a task in it (CallerRuns). However a stopper's trace reads,
// the stranded tasks are dropped, and every call returns. The review broke
// both in 3 of 3 runs when the loop read a trace to tell a task from a hook.
func TestAStrandedQueueIsDroppedWhateverTheStoppersStacks(t *testing.T) {
	for _, depth := range []int{0, 80} {
		t.Run(fmt.Sprint("panic handler, depth=", depth), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var p *workerpool.Pool
				handled := make(chan struct{})
				p = workerpool.New(3, workerpool.WithPanicHandler(func(*workerpool.PanicError) {
					deep(depth, p.StopWait)
					close(handled)
				}))
				gate, stopped := make(chan struct{}), make(chan struct{})
				var ran atomic.Int32
				require.NoError(t, p.SubmitKey("k", func() { <-gate; p.StopWait(); close(stopped) }))
				for range 2 {
					require.NoError(t, p.SubmitKey("k", func() { ran.Add(1) }))
				}
				require.NoError(t, p.Submit(func() { <-gate; deep(depth, func() { panic("stop") }) }))
				synctest.Wait()
				close(gate)
				<-stopped // (synctest reports a deadlock if it never comes)
				<-handled
				p.Stop()
				assert.Zero(t, ran.Load())
				assert.Equal(t, uint64(2), p.Status().Abandoned)
			})
		})
	}
	for _, via := range []string{"observer", "panic handler"} {
		t.Run("another pool's "+via, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(2)
				s := p.Subpool("s", 1)
				q := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns),
					workerpool.WithTaskObserver(func(workerpool.TaskTiming) {
						if via == "observer" && p.Status().State == workerpool.Running {
							p.StopWait()
						}
					}),
					workerpool.WithPanicHandler(func(*workerpool.PanicError) { p.StopWait() }))
				qgate := make(chan struct{})
				require.NoError(t, q.Submit(func() { <-qgate }))
				synctest.Wait()
				require.NoError(t, q.Submit(func() {})) // q's queue is full
				gate, stopped := make(chan struct{}), make(chan struct{})
				require.NoError(t, s.Submit(func() {
					<-gate
					if via == "observer" {
						_ = q.Submit(func() {}) // runs here, in p's task
					} else {
						_ = q.Submit(func() { panic("x") })
					}
					close(stopped)
				}))
				var ran atomic.Int32
				require.NoError(t, s.Submit(func() { ran.Add(1) }))
				synctest.Wait()
				close(gate)
				<-stopped
				close(qgate)
				p.Stop()
				q.StopWait()
				assert.Equal(t, int32(1), ran.Load(), "the task behind the stopper in its sub-pool of limit 1 ran in the place the stopper lent: p knew its worker")
				assertBalanced(t, p.Status())
			})
		})
	}
}

// TestAStoppersSubpoolRunsNoMoreThanItsLimitBesideTheStopper: a task of a
// sub-pool that waits in StopWait lends its place, so the sub-pool's other
// tasks run in it, but never more of them at once than its limit: a limit
// at the pool's maximum, and below a maximum of math.MaxInt, set by New or
// by Resize. Break 2 of issue 35: at the largest maximum, the maximum plus
// the stoppers overflowed, and all of the sub-pool's tasks ran at once.
func TestAStoppersSubpoolRunsNoMoreThanItsLimitBesideTheStopper(t *testing.T) {
	for _, tc := range []struct {
		name          string
		max, limit    int
		resizeToLimit bool
	}{
		{"max=limit=1", 1, 1, false},
		{"max=limit=2", 2, 2, false},
		{"max=limit=3", 3, 3, false},
		{"max=MaxInt, limit 1", math.MaxInt, 1, false},
		{"Resize(MaxInt), limit 1", 2, 1, true},
		{"max=MaxInt, limit 3", math.MaxInt, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(tc.max)
				if tc.resizeToLimit {
					p.Resize(math.MaxInt)
				}
				s := p.Subpool("s", tc.limit)
				var c peakCounter
				gate, stopped := make(chan struct{}), make(chan struct{})
				require.NoError(t, s.Submit(func() { <-gate; p.StopWait(); close(stopped) }))
				var ran atomic.Int32
				for range tc.limit + 3 {
					require.NoError(t, s.Submit(func() { c.enter(); time.Sleep(time.Millisecond); c.leave(); ran.Add(1) }))
				}
				synctest.Wait()
				close(gate)
				<-stopped
				p.Stop()
				assert.LessOrEqual(t, c.peak.Load(), int64(tc.limit), "the others of a sub-pool of limit %d at once", tc.limit)
				assert.Equal(t, int32(tc.limit+3), ran.Load(), "all ran: StopWait runs the queue")
				assertBalanced(t, s.Status())
			})
		})
	}
}

// TestAResizeDownWhileATaskStopsThePoolRunsTheQueue: Resize(1) from
// outside while a task's StopWait waits, with tasks queued: the stopper
// does not count against the maximum, so one other worker stays to run
// the queue, and the StopWait returns. The review saw it hang in 3 of 3
// runs: the stopper was counted among the workers to retire, so all the
// others retired.
func TestAResizeDownWhileATaskStopsThePoolRunsTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(3)
		gate, stopped, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
		require.NoError(t, p.Submit(func() { <-gate; p.StopWait(); close(stopped) }))
		var c peakCounter
		var ran atomic.Int32
		for range 7 {
			require.NoError(t, p.Submit(func() { c.enter(); <-release; c.leave(); ran.Add(1) }))
		}
		synctest.Wait()
		close(gate) // the stopper waits; a worker starts in its place
		synctest.Wait()
		c.peak.Store(0)
		p.Resize(1)
		close(release)
		<-stopped
		assert.Equal(t, int32(7), ran.Load())
		assert.LessOrEqual(t, c.peak.Load(), int64(2), "the running two finish; then one at a time")
	})
}

// TestAStrandedQueueIsDroppedBesideAStoppingPanicHandler: a panic handler
// that calls StopWait keeps its worker from being free for as long as it
// waits; a keyed task waits in StopWait with its key's tasks behind. The
// key's tasks are still dropped, and every call returns.
func TestAStrandedQueueIsDroppedBesideAStoppingPanicHandler(t *testing.T) {
	for range 200 {
		var p *workerpool.Pool
		handled := make(chan struct{})
		p = workerpool.New(3, workerpool.WithPanicHandler(func(*workerpool.PanicError) {
			p.StopWait()
			close(handled)
		}))
		gate, stopped := make(chan struct{}), make(chan struct{})
		var ran atomic.Int32
		require.NoError(t, p.SubmitKey("k", func() { <-gate; p.StopWait(); close(stopped) }))
		for range 2 {
			require.NoError(t, p.SubmitKey("k", func() { ran.Add(1) }))
		}
		require.NoError(t, p.Submit(func() { <-gate; panic("stop") }))
		close(gate)
		<-stopped
		<-handled
		p.Stop()
		require.Zero(t, ran.Load(), "a task of the stopper's key started")
		require.Equal(t, uint64(2), p.Status().Abandoned)
	}
}

// TestAStopFromATaskIsWaitedForOutside: a StopWait from outside, while a
// task's own StopWait waits, returns only once that task has ended, as
// for any running task.
func TestAStopFromATaskIsWaitedForOutside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		var ended atomic.Bool
		require.NoError(t, p.Submit(func() {
			p.StopWait()
			time.Sleep(time.Second) // the rest of the task
			ended.Store(true)
		}))
		synctest.Wait()
		p.StopWait()
		assert.True(t, ended.Load(), "the outside StopWait returned before the stopper's task ended")
		synctest.Wait()
		assert.Zero(t, p.Status().Workers)
	})
}

// TestStopsFromEveryWorkerRunTheWholeQueueWithinTheCap: a Local's open, or
// the task observer, that calls StopWait makes every worker a stopper. The
// first workers to stop lend their places, at most the maximum of them;
// past that cap a StopWait from a worker returns at once, as it cannot
// wait in a place the queue needs. So the pool never hangs, never has more
// than twice its maximum of workers, and runs every task it accepted: they
// waited only for a worker.
func TestStopsFromEveryWorkerRunTheWholeQueueWithinTheCap(t *testing.T) {
	for _, hook := range []string{"Local open", "task observer"} {
		for _, c := range []struct{ max, n int }{{1, 3}, {1, 66}, {1, 67}, {2, 5}, {4, 73}, {4, 200}} {
			t.Run(fmt.Sprintf("%s/New(%d)/%d tasks", hook, c.max, c.n), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var p *workerpool.Pool
					var ready atomic.Bool
					var opts []workerpool.Option
					if hook == "task observer" {
						opts = append(opts, workerpool.WithTaskObserver(func(workerpool.TaskTiming) {
							if ready.Load() {
								p.StopWait()
							}
						}))
					}
					p = workerpool.New(c.max, opts...)
					local := workerpool.NewLocal(func() (int, error) {
						if hook == "Local open" {
							p.StopWait()
						}
						return 0, nil
					}, nil)
					gate := make(chan struct{})
					for range c.max {
						require.NoError(t, p.Submit(func() { <-gate }))
					}
					var ran atomic.Int64
					for range c.n {
						require.NoError(t, local.Submit(p, func(int) { ran.Add(1) }))
					}
					ready.Store(true)
					close(gate)
					stopped := make(chan struct{})
					go func() { p.StopWait(); close(stopped) }()
					select {
					case <-stopped:
					case <-time.After(time.Hour): // of the bubble's clock, which idle workers' reaping moves on
						t.Fatalf("an outside StopWait hung: %s", p.Status())
					}
					st := p.Status()
					assert.Equal(t, int64(c.n), ran.Load(), "every Local task ran: none waited for more than a worker; %s", st)
					assert.Zero(t, st.Abandoned, "nothing was dropped")
					assert.LessOrEqual(t, st.PeakWorkers, 2*c.max, "at most the maximum of places lent")
					assert.Equal(t, workerpool.Stopped, st.State)
				})
			})
		}
	}
}

// TestAPastCapShutdownsDeadlineStillDropsTheQueue: on a pool of 1, a task
// calls StopWait, lending the only place (the cap); the worker started in
// it runs a task that calls Shutdown with a 10ms deadline, which, past the
// cap, returns at once. Its deadline holds for the pool all the same:
// once it passes, no queued task starts, the loop drops them, and every
// StopWait returns, the inner one and one from outside. A review found
// the loop never woken when the deadline passed: the queue stayed in the
// outbox, and both StopWaits hung.
func TestAPastCapShutdownsDeadlineStillDropsTheQueue(t *testing.T) {
	for _, idle := range []time.Duration{-1, 0} {
		t.Run(fmt.Sprint("idle timeout ", idle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(1, workerpool.WithIdleTimeout(idle))
				start, inner := make(chan struct{}), make(chan struct{})
				var ran atomic.Int32
				require.NoError(t, p.Submit(func() { <-start; p.StopWait(); close(inner) }))
				require.NoError(t, p.Submit(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
					defer cancel()
					dropped, err := p.Shutdown(ctx)
					assert.NoError(t, err, "past the cap, Shutdown returns nil, nil at once")
					assert.Nil(t, dropped)
					time.Sleep(20 * time.Millisecond) // past its deadline
				}))
				for range 4 {
					require.NoError(t, p.Submit(func() { ran.Add(1) }))
				}
				synctest.Wait()
				close(start)
				began := time.Now()
				outside := make(chan struct{})
				go func() { p.StopWait(); close(outside) }()
				for _, c := range []chan struct{}{inner, outside} {
					select {
					case <-c:
					case <-time.After(time.Minute):
						t.Fatalf("guarantees.md 3: a minute on, a StopWait still waits: %v", p.Status())
					}
				}
				assert.Less(t, time.Since(began), time.Second, "the deadline, not a reaped worker, ends the wait")
				s := p.Status()
				assert.Equal(t, uint64(4), uint64(ran.Load())+s.Abandoned, "guarantees.md 2: each queued task ran or was dropped")
				assert.Positive(t, s.Abandoned, "the deadline passed while they were queued")
				assertBalanced(t, s)
			})
		})
	}
}
