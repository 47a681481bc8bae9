package workerpool_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The tests in this file check the Shutdown deadlines the dispatcher
// watches (request.go): once a deadline has passed, no queued task of any
// queue starts, whichever Shutdown set it.

// TestNoQueuedTaskOfAnyQueueStartsAtAShutdownDeadline has eight workers end
// their tasks exactly at Shutdown's deadline, with sixty tasks queued
// behind them in the pool's queue, in two sub-pools' and under keys; with
// "merged", a Shutdown with a later deadline is already waiting. None of
// the sixty may start: each one comes back from a Shutdown, and the one
// whose deadline passed returns context.DeadlineExceeded.
func TestNoQueuedTaskOfAnyQueueStartsAtAShutdownDeadline(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		merged, subpools, keyed bool
	}{
		{"own queue", false, false, false},
		{"sub-pools", false, true, false},
		{"keys", false, false, true},
		{"sub-pools and keys", false, true, true},
		{"merged, own queue", true, false, false},
		{"merged, sub-pools and keys", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range rounds(20) {
				synctest.Test(t, func(t *testing.T) {
					p := workerpool.New(8)
					a, b := p.Subpool("a", 8), p.Subpool("b", 2)
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					for range 8 {
						require.NoError(t, p.Submit(func() { <-ctx.Done() }))
					}
					var started atomic.Int64
					task := func() { started.Add(1) }
					for i := range 60 {
						switch {
						case tc.subpools && i%3 == 1:
							require.NoError(t, a.Submit(task))
						case tc.subpools && i%3 == 2:
							require.NoError(t, b.Submit(task))
						case tc.keyed && i%2 == 0:
							require.NoError(t, p.SubmitKey(fmt.Sprint("k", i%4), task))
						default:
							require.NoError(t, p.Submit(task))
						}
					}
					synctest.Wait()
					other := make(chan []func(), 1)
					if tc.merged {
						later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
						defer cancelLater()
						go func() { tasks, _ := p.Shutdown(later); other <- tasks }()
						synctest.Wait()
					} else {
						other <- nil
					}
					tasks, err := p.Shutdown(ctx)
					assert.ErrorIs(t, err, context.DeadlineExceeded)
					assert.Zero(t, started.Load(), "no queued task started at the deadline")
					assert.Equal(t, 60, len(tasks)+len(<-other), "every queued task came back")
				})
			}
		})
	}
}

// TestNoQueuedTaskStartsAfterTheEarlierOfTwoShutdownDeadlines is the same on
// the real scheduler and clock, with 20,000 tiny tasks (4,000 under the race
// detector) queued behind eight workers that come free once a 20 ms deadline
// has passed; a second Shutdown, with a deadline an hour away, comes before it
// ("earlier"), after it ("later") or not at all ("one"). No task may start
// after the 20 ms deadline. The dispatcher used to watch one deadline, merged
// from both, and workers started queued tasks after the earlier one.
func TestNoQueuedTaskStartsAfterTheEarlierOfTwoShutdownDeadlines(t *testing.T) {
	queued := 20000
	if raceEnabled {
		queued = 4000 // submitting is slow under the race detector
	}
	for _, second := range []string{"one", "earlier", "later"} {
		t.Run(second, func(t *testing.T) {
			for round := range rounds(12) {
				p := workerpool.New(8)
				release := make(chan struct{})
				for range 8 {
					require.NoError(t, p.Submit(func() { <-release }))
				}
				var deadline atomic.Pointer[context.Context]
				var late atomic.Int64
				for range queued {
					require.NoError(t, p.Submit(func() {
						if ctx := deadline.Load(); ctx != nil && (*ctx).Err() != nil {
							late.Add(1)
						}
					}))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				deadline.Store(&ctx)
				context.AfterFunc(ctx, func() { close(release) })
				later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
				untilStopping := func() {
					for p.Status().State == workerpool.Running {
						runtime.Gosched()
					}
				}
				other := make(chan []func(), 1)
				shutdownLater := func() {
					go func() { tasks, _ := p.Shutdown(later); other <- tasks }()
					untilStopping()
				}
				if second == "earlier" {
					shutdownLater()
				}
				returned := make(chan []func(), 1)
				go func() { tasks, _ := p.Shutdown(ctx); returned <- tasks }()
				if second == "later" {
					untilStopping()
					shutdownLater()
				}
				if second == "one" {
					other <- nil
				}
				n := len(<-returned) + len(<-other)
				cancel()
				cancelLater()
				if late.Load() > 0 {
					t.Fatalf("round %d: %d queued tasks started after the 20 ms deadline had passed; %d came back",
						round, late.Load(), n)
				}
			}
		})
	}
}
