package workerpool_test

import (
	"context"
	"io"
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
