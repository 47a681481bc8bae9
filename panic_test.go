package workerpool_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

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

// crashEnv names the environment variable that makes the test binary run
// one of the crashing programs below instead of the tests.
const crashEnv = "WORKERPOOL_CRASH_CHILD"

// crashPrograms are programs whose only correct outcome is a crash.
var crashPrograms = map[string]func(){
	"handler panics on a worker": func() {
		p := workerpool.New(1, workerpool.WithPanicHandler(func(pe *workerpool.PanicError) { panic("handler: " + pe.Value.(string)) }))
		_ = p.Submit(func() { panic("task") })
		p.StopWait()
	},
	"handler panics under CallerRuns": func() {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns),
			workerpool.WithPanicHandler(func(pe *workerpool.PanicError) { panic("handler: " + pe.Value.(string)) }))
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
