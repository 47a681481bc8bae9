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

// heldPools are two ways a pool can hold tasks back from a worker for an
// hour: a pause, and a queue behind tasks that run for an hour.
var heldPools = []struct {
	name string
	new  func(t *testing.T) *workerpool.Pool
}{
	{"paused pool", func(t *testing.T) *workerpool.Pool {
		p := workerpool.New(2)
		ctx, resume := context.WithTimeout(context.Background(), time.Hour)
		t.Cleanup(resume)
		p.Pause(ctx)
		return p
	}},
	{"busy shared pool", func(t *testing.T) *workerpool.Pool {
		p := workerpool.New(1)
		require.NoError(t, p.Submit(func() { time.Sleep(time.Hour) }))
		for range 100 { // other users' work, queued ahead
			require.NoError(t, p.Submit(func() { time.Sleep(time.Hour) }))
		}
		return p
	}},
}

func TestGroupWaitAfterCancellationDoesNotWaitForTasksThatWillNotRun(t *testing.T) {
	for _, held := range heldPools {
		t.Run(held.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := held.new(t)
				errCause := errors.New("gave up")
				ctx, cancel := context.WithCancelCause(context.Background())
				g := p.Group(ctx)
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
				p := held.new(t)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				start := time.Now()
				out, err := workerpool.Map(ctx, p, make([]int, 10), func(context.Context, int) (int, error) {
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
