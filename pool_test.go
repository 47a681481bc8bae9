package workerpool_test

import (
	"context"
	"testing"
	"testing/synctest"

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
