package workerpool_test

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

func TestFutureWaitReturnsTheTasksResult(t *testing.T) {
	p := workerpool.New(2)
	defer p.Stop()

	f := workerpool.Go(p, func() (string, error) { return "forty-two", nil })
	v, err := f.Wait()
	assert.NoError(t, err)
	assert.Equal(t, "forty-two", v)

	g := workerpool.Go(p, func() (int, error) { return 7, io.EOF })
	n, err := g.Wait()
	assert.Equal(t, 7, n, "the value comes back with the error, as fn returned it")
	assert.Equal(t, io.EOF, err)
}

func TestFutureTasksWritesHappenBeforeWaitReturns(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	futures := make([]*workerpool.Future[int], 100)
	side := make([]int, len(futures))
	for i := range futures {
		futures[i] = workerpool.Go(p, func() (int, error) {
			side[i] = i // -race checks the ordering
			return i * i, nil
		})
	}
	for i, f := range futures {
		v, err := f.Wait()
		require.NoError(t, err)
		assert.Equal(t, i*i, v)
		assert.Equal(t, i, side[i])
	}
}

func TestFutureReportsAPanicAsPanicError(t *testing.T) {
	p := workerpool.New(1, workerpool.WithPanicHandler(func(*workerpool.PanicError) {
		t.Error("a Future's panic goes to its Wait, not the handler")
	}))
	defer p.Stop()
	f := workerpool.Go(p, func() (int, error) { panic(io.ErrUnexpectedEOF) })
	v, err := f.Wait()
	assert.Zero(t, v)
	var pe *workerpool.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, io.ErrUnexpectedEOF, pe.Value)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, uint64(1), p.Status().Panicked)
}

func TestFutureOfAStoppedPoolReportsErrStopped(t *testing.T) {
	t.Run("dropped by Stop before it started", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(1)
			release := hold(t, p, 1)
			ran := false
			f := workerpool.Go(p, func() (int, error) { ran = true; return 1, nil })
			synctest.Wait()
			assert.False(t, isDone(f.Done()), "the Future waits in the queue")

			stopped := make(chan []func())
			go func() { stopped <- p.Stop() }()
			synctest.Wait() // Stop dropped the queue and waits for the running task
			assert.True(t, isDone(f.Done()), "a dropped Future is done before Stop returns")
			v, err := f.Wait()
			assert.ErrorIs(t, err, workerpool.ErrStopped)
			assert.Zero(t, v)
			release()
			assert.Empty(t, <-stopped, "a Future is not handed back by Stop")
			assert.False(t, ran)
		})
	})
	t.Run("stopped before Go", func(t *testing.T) {
		p := workerpool.New(1)
		p.StopWait()
		f := workerpool.Go(p, func() (int, error) { t.Error("ran on a stopped pool"); return 0, nil })
		assert.True(t, isDone(f.Done()))
		_, err := f.Wait()
		assert.ErrorIs(t, err, workerpool.ErrStopped)
	})
}

func TestGoReportsWhyThePoolRefusedTheTask(t *testing.T) {
	t.Run("nil func", func(t *testing.T) {
		p := workerpool.New(1)
		defer p.Stop()
		_, err := workerpool.Go[int](p, nil).Wait()
		assert.ErrorIs(t, err, workerpool.ErrNilTask)
		assert.Zero(t, p.Status().Submitted)
	})
	t.Run("full queue under Reject", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.Reject))
			release := hold(t, p, 2) // one runs, one waits: the queue is full
			synctest.Wait()
			f := workerpool.Go(p, func() (int, error) { t.Error("a rejected task ran"); return 0, nil })
			_, err := f.Wait()
			assert.ErrorIs(t, err, workerpool.ErrQueueFull)
			release()
			p.StopWait()
		})
	})
	t.Run("full queue under CallerRuns runs it in Go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
			release := hold(t, p, 2)
			synctest.Wait()
			f := workerpool.Go(p, func() (int, error) { return 5, nil })
			assert.True(t, isDone(f.Done()), "Go ran fn itself")
			v, err := f.Wait()
			assert.NoError(t, err)
			assert.Equal(t, 5, v)
			release()
			p.StopWait()
		})
	})
}

func TestFutureDoneIsClosedWhenTheTaskEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		defer p.Stop()
		f := workerpool.Go(p, func() (int, error) {
			time.Sleep(time.Second)
			return 3, nil
		})
		done := f.Done()
		assert.Equal(t, done, f.Done(), "every call returns the same channel")
		synctest.Wait()
		assert.False(t, isDone(done), "not closed while the task runs")

		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatal("Done not closed after the task ended")
		}
		v, err := f.Wait()
		assert.NoError(t, err)
		assert.Equal(t, 3, v)
		assert.Equal(t, done, f.Done())

		// Done first asked for after the task ended is closed too.
		late := workerpool.Go(p, func() (int, error) { return 0, nil })
		_, _ = late.Wait()
		assert.True(t, isDone(late.Done()))
	})
}

func TestFutureWaitMayBeCalledManyTimesFromManyGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		start := make(chan struct{})
		f := workerpool.Go(p, func() (string, error) {
			<-start
			return "v", io.EOF
		})
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				if i%2 == 0 {
					<-f.Done()
				}
				for range 3 {
					v, err := f.Wait()
					assert.Equal(t, "v", v)
					assert.Equal(t, io.EOF, err)
				}
			})
		}
		synctest.Wait() // every waiter is blocked
		close(start)
		wg.Wait()
	})
}

func TestFutureAfterGoexitReturnsZeroAndNil(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	v, err := workerpool.Go(p, func() (int, error) {
		runtime.Goexit()
		return 1, io.EOF
	}).Wait()
	assert.NoError(t, err, "as SubmitWait: a task that calls Goexit counts as returned")
	assert.Zero(t, v)
}

func TestGoAllocatesOnlyTheFuture(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	fn := func() (int, error) { return 1, nil }
	assert.Equal(t, 1.0, testing.AllocsPerRun(10000, func() {
		_, _ = workerpool.Go(p, fn).Wait()
	}), "Go and Wait")
	assert.Equal(t, 1.0, testing.AllocsPerRun(10000, func() {
		f := workerpool.Go(p, fn)
		_, _ = f.Wait()
		<-f.Done()
	}), "Done after the task ended allocates nothing")
	// Done before the task ends allocates its channel: at most one more.
	allocs := testing.AllocsPerRun(10000, func() { <-workerpool.Go(p, fn).Done() })
	assert.LessOrEqual(t, allocs, 2.0, "Done before the end")
}

func TestFutureOfARacingStopRunsOrReportsErrStopped(t *testing.T) {
	for range 20 {
		p := workerpool.New(2)
		var ran atomic.Int64
		futures := make([]*workerpool.Future[int], 200)
		go p.Stop()
		for i := range futures {
			futures[i] = workerpool.Go(p, func() (int, error) { ran.Add(1); return i, nil })
		}
		var ok int64
		for i, f := range futures {
			v, err := f.Wait() // never hangs
			if err == nil {
				assert.Equal(t, i, v)
				ok++
			} else {
				assert.ErrorIs(t, err, workerpool.ErrStopped)
			}
		}
		p.Stop()
		assert.Equal(t, ran.Load(), ok, "a Future reports success exactly when its fn ran")
	}
}

func ExampleGo() {
	p := workerpool.New(4)
	defer p.StopWait()

	// Start three lookups; each Future holds one result.
	parse := func(s string) *workerpool.Future[int] {
		return workerpool.Go(p, func() (int, error) { return strconv.Atoi(s) })
	}
	a, b, c := parse("20"), parse("22"), parse("forty")

	// Wait for them in any order; each Wait returns its task's result.
	x, errA := a.Wait()
	y, errB := b.Wait()
	fmt.Println(x+y, errA, errB)

	_, err := c.Wait()
	fmt.Println(errors.Is(err, strconv.ErrSyntax))
	// Output:
	// 42 <nil> <nil>
	// true
}

// Go with a nil Submitter panics at once with a message that names it,
// rather than with a nil dereference.
func TestGoWithANilSubmitterPanicsNamingIt(t *testing.T) {
	for _, ns := range nilSubmitters {
		t.Run(ns.name, func(t *testing.T) {
			assert.PanicsWithValue(t, "workerpool: Go: nil Submitter", func() {
				workerpool.Go(ns.s, func() (int, error) { return 1, nil })
			})
		})
	}
}
