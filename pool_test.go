package workerpool_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// stoppers are the three ways to stop a pool, for promises that hold for each.
var stoppers = []struct {
	name string
	stop func(*workerpool.Pool)
}{
	{"Stop", func(p *workerpool.Pool) { p.Stop() }},
	{"StopWait", (*workerpool.Pool).StopWait},
	{"Shutdown", func(p *workerpool.Pool) { _, _ = p.Shutdown(context.Background()) }},
}

func TestNewPanicsOnImpossibleConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		opts []workerpool.Option
	}{
		{"zero max", 0, nil},
		{"negative max", -3, nil},
		{"nil option", 2, []workerpool.Option{nil}},
		{"min above max", 2, []workerpool.Option{workerpool.WithMinWorkers(3)}},
		{"negative min", 2, []workerpool.Option{workerpool.WithMinWorkers(-1)}},
		{"negative queue bound", 2, []workerpool.Option{workerpool.WithMaxWaiting(-1)}},
		{"unknown overflow", 2, []workerpool.Option{workerpool.WithOverflow(workerpool.Overflow(7))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				assert.Regexp(t, `^workerpool: `, msg)
			}()
			workerpool.New(tc.max, tc.opts...)
			t.Error("New did not panic")
		})
	}
}

func TestNewAcceptsBoundaryConfiguration(t *testing.T) {
	p := workerpool.New(3, workerpool.WithMinWorkers(3), workerpool.WithMaxWaiting(0), workerpool.WithIdleTimeout(-1), workerpool.WithPanicHandler(nil))
	defer p.Stop()
	s := p.Status()
	assert.Equal(t, 3, s.Workers, "MinWorkers workers start in New")
	assert.Equal(t, 3, s.MinWorkers)
	assert.Equal(t, 3, s.MaxWorkers)
	assert.Equal(t, 3, p.Size())
}

func TestNilTaskIsRejected(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.ErrorIs(t, p.Submit(nil), workerpool.ErrNilTask)
	assert.ErrorIs(t, p.SubmitCtx(context.Background(), nil), workerpool.ErrNilTask)
	assert.ErrorIs(t, p.TrySubmit(nil), workerpool.ErrNilTask)
	assert.ErrorIs(t, p.SubmitWait(nil), workerpool.ErrNilTask)
	assert.Zero(t, p.Status().Submitted)
}

func TestEverySubmitMethodFailsAfterStop(t *testing.T) {
	for _, stop := range stoppers {
		t.Run(stop.name, func(t *testing.T) {
			p := workerpool.New(2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
			stop.stop(p)
			ran := false
			task := func() { ran = true }
			assert.True(t, p.Stopped())
			assert.ErrorIs(t, p.Submit(task), workerpool.ErrStopped)
			assert.ErrorIs(t, p.SubmitCtx(context.Background(), task), workerpool.ErrStopped)
			assert.ErrorIs(t, p.TrySubmit(task), workerpool.ErrStopped)
			assert.ErrorIs(t, p.SubmitWait(task), workerpool.ErrStopped)
			assert.False(t, ran, "no task runs after stop, not even in the caller")
			assert.Equal(t, workerpool.Stopped, p.Status().State)
		})
	}
}

func TestTasksStartInSubmissionOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		release := hold(t, p, 1) // everything below waits in the queue
		var order []int
		for i := range 20 {
			if i%5 == 4 {
				// A SubmitWait task keeps its place in the queue too.
				go func() { assert.NoError(t, p.SubmitWait(func() { order = append(order, i) })) }()
				synctest.Wait() // accepted before the next submission
				continue
			}
			require.NoError(t, p.Submit(func() { order = append(order, i) }))
		}
		synctest.Wait()
		assert.Equal(t, 20, p.WaitingQueueSize())
		release()
		p.StopWait()
		want := make([]int, 20)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, order)
	})
}

func TestNeverMoreThanMaxTasksRunAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const max = 4
		p := workerpool.New(max)
		var running, peak atomic.Int64
		for i := range 200 {
			require.NoError(t, p.Submit(func() {
				n := running.Add(1)
				for {
					old := peak.Load()
					if n <= old || peak.CompareAndSwap(old, n) {
						break
					}
				}
				time.Sleep(time.Duration(i%7) * time.Millisecond)
				running.Add(-1)
			}))
		}
		p.StopWait()
		assert.Equal(t, int64(max), peak.Load(), "peak concurrency reaches the maximum and no more")
		assert.Equal(t, max, p.Status().PeakWorkers)
		assert.Equal(t, uint64(200), p.Status().Completed)
	})
}

func TestTasksGoToIdleWorkersBeforeNewOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8)
		for range 10 {
			require.NoError(t, p.Submit(func() {}))
			synctest.Wait() // the worker is back and idle
		}
		assert.Equal(t, 1, p.Status().Workers, "sequential tasks reuse the idle worker")
		p.Stop()
	})
}

func TestSubmitOfAPreparedFuncAllocatesNothing(t *testing.T) {
	for _, n := range []int{1, 64} { // through the queue, and straight to workers
		p := workerpool.New(n)
		task := func() {}
		allocs := testing.AllocsPerRun(10000, func() { _ = p.Submit(task) })
		p.StopWait()
		assert.Zero(t, allocs, "max %d workers", n)
	}
}

func TestSubmitWaitAllocatesOneWaiter(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	task := func() {}
	assert.Equal(t, 1.0, testing.AllocsPerRun(10000, func() { _ = p.SubmitWait(task) }))
}

func TestSubmitWaitReturnsAfterTheTask(t *testing.T) {
	p := workerpool.New(2)
	defer p.Stop()
	x := 0
	require.NoError(t, p.SubmitWait(func() { x = 42 }))
	assert.Equal(t, 42, x, "the task's writes happen before SubmitWait returns") // -race checks it too
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

func TestDefaultPanicHandlerLogsWithSlog(t *testing.T) {
	var buf bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	p := workerpool.New(1)
	require.NoError(t, p.Submit(func() { panic("boom") }))
	p.StopWait()
	assert.Contains(t, buf.String(), `msg="workerpool: task panicked" panic=boom stack=`)
}

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
