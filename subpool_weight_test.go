package workerpool_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests of weighted turns: queues that wait take turns in proportion
// to their weights, interleaved; a sub-pool at its limit keeps its turn;
// weight 1 is plain round robin. (The shares over 10,000 turns are checked
// on the scheduler alone, in internal/sched.)

func TestSubpoolsTakeTurnsInProportionToTheirWeights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		a := p.Subpool("a", 1, workerpool.WithWeight(3))
		b := p.Subpool("b", 1)
		ctx, cancel := context.WithCancel(context.Background())
		p.Pause(ctx) // every task waits before the first turn
		var s starts
		for range 12 {
			require.NoError(t, a.Submit(s.task("a")))
			require.NoError(t, b.Submit(s.task("b")))
		}
		cancel()
		p.StopWait()
		got := strings.Join(s.got(), "")
		for n := 1; n <= 16; n++ {
			assert.InDelta(t, 0.75*float64(n), float64(strings.Count(got[:n], "a")), 1, "a's share of the first %d turns: %s", n, got)
		}
		assert.NotContains(t, got[:16], "aaaa", "three of a for one of b, interleaved")
		assert.NotContains(t, got[:16], "bb")
		assert.True(t, strings.HasSuffix(got, "bbbbbbbb"), "b alone once a has none: %s", got)
	})
}

func TestAWeightedSubpoolAtItsLimitKeepsItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		a := p.Subpool("a", 1, workerpool.WithWeight(4))
		block := make(chan struct{})
		var s starts
		require.NoError(t, a.Submit(func() { <-block })) // a at its limit
		release := hold(t, p, 1)
		synctest.Wait()
		require.NoError(t, a.Submit(s.task("a1")))
		require.NoError(t, a.Submit(s.task("a2")))
		for i := range 3 {
			require.NoError(t, p.Submit(s.task(fmt.Sprint("p", i))))
		}
		release()
		synctest.Wait()
		assert.Equal(t, []string{"p0", "p1", "p2"}, s.got(), "a is passed over while at its limit")
		close(block)
		p.StopWait()
		assert.Equal(t, []string{"p0", "p1", "p2", "a1", "a2"}, s.got())
	})
}

func TestWithWeightOutsideItsRangePanics(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.PanicsWithValue(t, `workerpool: Subpool("a", 1): WithWeight(0) is outside 1..MaxWeight`, func() { p.Subpool("a", 1, workerpool.WithWeight(0)) })
	assert.Panics(t, func() { p.Subpool("a", 1, workerpool.WithWeight(workerpool.MaxWeight+1)) })
	assert.Panics(t, func() { p.Subpool("a", 1, nil) })
	assert.NotPanics(t, func() { p.Subpool("a", 1, workerpool.WithWeight(workerpool.MaxWeight)) })
}

// A sub-pool of weight 2 takes two turns for each of a sub-pool of weight
// 1, interleaved.
func ExampleWithWeight() {
	p := workerpool.New(1) // one worker, so the start order is plain
	paid := p.Subpool("paid", 1, workerpool.WithWeight(2))
	free := p.Subpool("free", 1)

	var mu sync.Mutex
	var order []string
	record := func(name string) func() {
		return func() {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
	}
	ctx, resume := context.WithCancel(context.Background())
	p.Pause(ctx) // hold the worker while both queues fill
	for range 6 {
		paid.Submit(record("paid"))
		free.Submit(record("free"))
	}
	resume()

	p.StopWait()
	fmt.Println(strings.Join(order[:9], " "))
	// Output: paid free paid paid free paid paid free paid
}
