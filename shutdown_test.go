package workerpool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// cancelled returns a context that is already done.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestShutdownWithADoneCtxStartsNoQueuedTask(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(p *workerpool.Pool) (release func())
	}{
		{"paused pool", func(p *workerpool.Pool) func() {
			p.Pause(context.Background()) // Shutdown ends it
			return func() {}
		}},
		{"every worker busy", func(p *workerpool.Pool) func() {
			block := make(chan struct{})
			for range 4 {
				require.NoError(t, p.Submit(func() { <-block }))
			}
			return func() { close(block) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(4)
				release := tc.setup(p)
				var ran atomic.Int64
				for range 10 {
					require.NoError(t, p.Submit(func() { ran.Add(1) }))
				}
				synctest.Wait()
				require.Equal(t, 10, p.WaitingQueueSize())

				type result struct {
					tasks []func()
					err   error
				}
				done := make(chan result)
				go func() {
					tasks, err := p.Shutdown(cancelled())
					done <- result{tasks, err}
				}()
				synctest.Wait()
				release()
				r := <-done
				assert.ErrorIs(t, r.err, context.Canceled)
				assert.Len(t, r.tasks, 10, "every queued task comes back")
				assert.Zero(t, ran.Load(), "no queued task started")
				assert.Equal(t, uint64(10), p.Status().Abandoned)
			})
		})
	}
}

func TestShutdownReturnsNilNilWhenNoTaskWasDropped(t *testing.T) {
	t.Run("idle pool, done ctx", func(t *testing.T) {
		for range 200 { // the rule holds on every run, not most
			p := workerpool.New(4)
			require.NoError(t, p.SubmitWait(func() {}))
			tasks, err := p.Shutdown(cancelled())
			require.NoError(t, err, "nothing was dropped")
			require.Nil(t, tasks)
		}
	})
	t.Run("a running task outlives ctx, nothing queued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(1)
			require.NoError(t, p.Submit(func() { time.Sleep(2 * time.Second) }))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			tasks, err := p.Shutdown(ctx)
			assert.NoError(t, err, "every accepted task ran")
			assert.Nil(t, tasks)
			assert.Equal(t, 2*time.Second, time.Since(start), "Shutdown waits for running tasks")
		})
	})
}

func TestShutdownReturnsCtxErrWhenItDroppedATask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		require.NoError(t, p.Submit(func() { time.Sleep(time.Second) }))
		waitErr := make(chan error)
		go func() { waitErr <- p.SubmitWait(func() { t.Error("a dropped task ran") }) }()
		synctest.Wait()
		tasks, err := p.Shutdown(cancelled())
		assert.ErrorIs(t, err, context.Canceled, "a dropped SubmitWait task counts as dropped")
		assert.Empty(t, tasks, "SubmitWait tasks are not returned")
		assert.ErrorIs(t, <-waitErr, workerpool.ErrStopped)
	})
}
