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

// A Group whose context is done takes its queued tasks out of the queue at
// once, before Wait is even called: they never run, Waiting drops, and
// Status counts them Canceled.
func TestAGroupsQueuedTasksLeaveTheQueueOnceItsContextIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(8))
		block := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-block }))
		ctx, cancel := context.WithCancel(context.Background())
		g := p.Group(ctx)
		for range 5 {
			g.Go(func(context.Context) error { t.Error("a task ran after its group's context was done"); return nil })
		}
		synctest.Wait()
		require.Equal(t, 5, p.Status().Waiting)

		cancel()
		synctest.Wait()
		s := p.Status()
		assert.Zero(t, s.Waiting, "the group's tasks left the queue")
		assert.Equal(t, uint64(5), s.Canceled)
		for range 8 {
			assert.NoError(t, p.TrySubmit(func() {}), "the bounded queue has its room back")
		}

		assert.ErrorIs(t, g.Wait(), context.Canceled)
		assert.Equal(t, 5, g.Skipped())
		close(block)
		p.StopWait()
		s = p.Status()
		assert.Equal(t, s.Submitted, s.Completed+s.Canceled)
	})
}

// Map's items that have not started when its context is done leave the
// queue at once too.
func TestMapsQueuedItemsLeaveTheQueueOnceItsContextIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.StopWait()
		ctx, cancel := context.WithCancel(context.Background())
		items := make([]int, 4) // the window: twice the two workers
		started, release := make(chan struct{}, 4), make(chan struct{})
		done := make(chan error)
		go func() {
			_, err := workerpool.Map(ctx, p, items, func(ctx context.Context, _ int) (int, error) {
				started <- struct{}{}
				<-release
				return 0, nil
			})
			done <- err
		}()
		synctest.Wait()
		require.Len(t, started, 2, "two items run, two wait")
		require.Equal(t, 2, p.Status().Waiting)
		cancel()
		synctest.Wait()
		s := p.Status()
		assert.Zero(t, s.Waiting, "at once, while the two running items go on")
		assert.Equal(t, uint64(2), s.Canceled, "the two waiting items never ran")
		close(release)
		assert.ErrorIs(t, <-done, context.Canceled)
		assert.Equal(t, uint64(2), p.Status().Completed)
	})
}
