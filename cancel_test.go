package workerpool_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// grouper is a *Pool or a *Subpool: where a Group or Map sends its tasks.
type grouper interface {
	workerpool.Submitter
	Group(ctx context.Context) *workerpool.Group
}

// heldPools are three ways a pool can hold tasks back from a worker for an
// hour: a pause, a queue behind tasks that run for an hour, and a sub-pool
// at its limit while the pool's workers are free. new returns the pool and
// where the tasks go.
var heldPools = []struct {
	name string
	new  func(t *testing.T) (*workerpool.Pool, grouper)
}{
	{"paused pool", func(t *testing.T) (*workerpool.Pool, grouper) {
		p := workerpool.New(2)
		ctx, resume := context.WithTimeout(context.Background(), time.Hour)
		t.Cleanup(resume)
		p.Pause(ctx)
		return p, p
	}},
	{"busy shared pool", func(t *testing.T) (*workerpool.Pool, grouper) {
		p := workerpool.New(1)
		require.NoError(t, p.Submit(func() { time.Sleep(time.Hour) }))
		for range 100 { // other users' work, queued ahead
			require.NoError(t, p.Submit(func() { time.Sleep(time.Hour) }))
		}
		return p, p
	}},
	{"sub-pool at its limit", func(t *testing.T) (*workerpool.Pool, grouper) {
		p := workerpool.New(4)
		a := p.Subpool("a", 1)
		require.NoError(t, a.Submit(func() { time.Sleep(time.Hour) }))
		return p, a
	}},
}

func TestGroupWaitAfterCancellationDoesNotWaitForTasksThatWillNotRun(t *testing.T) {
	for _, held := range heldPools {
		t.Run(held.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, to := held.new(t)
				errCause := errors.New("gave up")
				ctx, cancel := context.WithCancelCause(context.Background())
				g := to.Group(ctx)
				for range 5 {
					g.Go(func(context.Context) error { t.Error("a skipped task ran"); return nil })
				}
				synctest.Wait()
				start := time.Now()
				cancel(errCause)
				assert.ErrorIs(t, g.Wait(), errCause)
				assert.Zero(t, time.Since(start), "Wait returned at once")
				assert.Equal(t, 5, g.Skipped())

				p.StopWait() // workers reach the skipped tasks now: none runs
				assert.Equal(t, 5, g.Skipped(), "each skipped task is counted once")
				assert.ErrorIs(t, g.Wait(), errCause)
			})
		})
	}
}

func TestMapAfterCancellationDoesNotWaitForItemsThatWillNotRun(t *testing.T) {
	for _, held := range heldPools {
		t.Run(held.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, to := held.new(t)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				start := time.Now()
				out, err := workerpool.Map(ctx, to, make([]int, 10), func(context.Context, int) (int, error) {
					t.Error("an item ran")
					return 0, nil
				})
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Nil(t, out)
				assert.Equal(t, time.Second, time.Since(start), "Map returned when ctx was done")
				p.StopWait() // workers reach the skipped items now: none runs
			})
		})
	}
}
