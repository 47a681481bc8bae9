package natsjs

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A handler's deadline (WithHandlerTimeout) and the stop both cancel its
// ctx; whichever came first says whose failure it was: past the deadline,
// an attempt like any other, even if the stop came later; cancelled by
// the stop before its deadline, the stop's, even once the deadline has
// passed too.
func TestWhoseFailureItIsIsDecidedByWhatCancelledTheHandlersCtxFirst(t *testing.T) {
	const d = time.Second
	newRun := func(timeout time.Duration) *run {
		r := &run{cfg: config{handlerTimeout: timeout}}
		r.hctx, r.hcancel = context.WithCancel(context.Background())
		return r
	}
	t.Run("the deadline, then the stop", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRun(d)
			ctx, cancel := r.handlerContext()
			require.NotNil(t, cancel)
			defer cancel()
			deadline, ok := ctx.Deadline()
			require.True(t, ok)
			assert.Equal(t, time.Now().Add(d), deadline)
			time.Sleep(d - time.Nanosecond)
			assert.NoError(t, ctx.Err(), "the deadline passed early")
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
			assert.False(t, r.stoppedBy(ctx))
			r.hcancel()
			assert.False(t, r.stoppedBy(ctx), "a failure past the deadline became the stop's")
		})
	})
	t.Run("the stop, then the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRun(d)
			ctx, cancel := r.handlerContext()
			defer cancel()
			time.Sleep(d / 2)
			assert.False(t, r.stoppedBy(ctx))
			r.hcancel()
			assert.ErrorIs(t, ctx.Err(), context.Canceled)
			assert.True(t, r.stoppedBy(ctx))
			time.Sleep(d)
			assert.True(t, r.stoppedBy(ctx), "the stop's failure became an attempt once the deadline passed")
		})
	})
	t.Run("no deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRun(0)
			ctx, cancel := r.handlerContext()
			assert.Nil(t, cancel)
			_, ok := ctx.Deadline()
			assert.False(t, ok)
			time.Sleep(time.Hour)
			assert.False(t, r.stoppedBy(ctx))
			r.hcancel()
			assert.True(t, r.stoppedBy(ctx))
		})
	})
}
