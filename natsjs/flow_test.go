package natsjs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNeverMoreThanMaxInFlightMessagesAreHeld(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		const jobs = 40
		cases := []struct {
			name        string
			workers     int
			maxInFlight int // 0: the default, twice the workers
		}{
			{"one worker, one in flight", 1, 1},
			{"fewer workers than in flight", 2, 5},
			{"more workers than in flight", 8, 3},
			{"default bound", 3, 0},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel() // each its own server
				bound := tc.maxInFlight
				var opts []natsjs.Option
				if bound == 0 {
					bound = 2 * tc.workers
				} else {
					opts = append(opts, natsjs.WithMaxInFlight(bound))
				}
				s := startServer(t)
				_, js := connect(t, s)
				cons := workQueue(t, js, 30*time.Second, 0)
				publishJobs(t, js, jobs)

				release := make(chan struct{})
				var running, peakRunning atomic.Int32
				ta := newTally()
				stop := consuming(t, newPool(t, tc.workers), cons, func(ctx context.Context, msg jetstream.Msg) error {
					n := running.Add(1)
					defer running.Add(-1)
					for {
						peak := peakRunning.Load()
						if n <= peak || peakRunning.CompareAndSwap(peak, n) {
							break
						}
					}
					<-release // the handlers block: messages pile up
					ta.add(msg)
					return nil
				}, via.opts(js, opts...)...)

				// The server's count of unacked deliveries is what this
				// process holds; watch it throughout.
				var peakPending atomic.Int64
				watchDone := make(chan struct{})
				var watch sync.WaitGroup
				watch.Go(func() {
					for {
						if info, err := cons.Info(context.Background()); err == nil && int64(info.NumAckPending) > peakPending.Load() {
							peakPending.Store(int64(info.NumAckPending))
						}
						select {
						case <-watchDone:
							return
						case <-time.After(2 * time.Millisecond):
						}
					}
				})

				eventually(t, func() bool {
					return int(running.Load()) == min(tc.workers, bound) && peakPending.Load() == int64(bound)
				}, "the process did not fill its bound")
				// Whatever the timing, the blocked process stays at its bound.
				for range 20 {
					assert.LessOrEqual(t, consumerInfo(t, cons).NumAckPending, bound)
					time.Sleep(10 * time.Millisecond)
				}
				close(release)
				eventually(t, func() bool { return ta.distinct() == jobs }, "not every job handled")
				close(watchDone)
				watch.Wait()
				require.NoError(t, stop())

				assert.Equal(t, int64(bound), peakPending.Load(), "held more than the bound")
				assert.Equal(t, int32(min(tc.workers, bound)), peakRunning.Load())
				requireEachOnce(t, ta, jobs)
			})
		}
	})
}

func TestAMessageWaitingOrRunningLongerThanAckWaitIsNotRedelivered(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		const ackWait = 2 * time.Second // progress every 667ms: slack for a loaded machine
		// One worker; each job runs for 1.5 AckWaits. In the pool's unbounded
		// queue, the second job waits for more than AckWait and the third for
		// more than twice. Behind a queue bounded at one, the third waits in
		// Run for more than AckWait while the feeder waits for room or
		// retries; when the caller runs, the feeder runs the third job itself
		// and the fourth waits in Run meanwhile.
		cases := []struct {
			name string
			jobs int
			opts []workerpool.Option
		}{
			{"unbounded queue", 3, nil},
			{"bounded queue that blocks", 3, []workerpool.Option{workerpool.WithMaxWaiting(1)}},
			{"bounded queue that rejects", 3, []workerpool.Option{workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.Reject)}},
			{"bounded queue whose caller runs", 4, []workerpool.Option{workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns)}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel() // each waits on AckWaits, not on the CPU
				s := startServer(t)
				_, js := connect(t, s)
				cons := workQueue(t, js, ackWait, 0)
				publishJobs(t, js, tc.jobs)

				ta := newTally()
				stop := consuming(t, newPool(t, 1, tc.opts...), cons, func(ctx context.Context, msg jetstream.Msg) error {
					ta.add(msg)
					time.Sleep(ackWait * 3 / 2)
					return nil
				}, via.opts(js, natsjs.WithMaxInFlight(tc.jobs))...)

				eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs not all acked")
				require.NoError(t, stop())
				requireEachOnce(t, ta, tc.jobs)
				assert.Zero(t, consumerInfo(t, cons).NumRedelivered, "a held message was redelivered")
			})
		}
	})
}

func TestAHandlersContextIsDoneWhenRunsIs(t *testing.T) {
	forEachPath(t, func(t *testing.T, via pullPath) {
		s := startServer(t)
		_, js := connect(t, s)
		cons := workQueue(t, js, 30*time.Second, 0)
		publishJobs(t, js, 1)

		started := make(chan struct{})
		var sawDone atomic.Bool
		stop := consuming(t, newPool(t, 1), cons, func(ctx context.Context, msg jetstream.Msg) error {
			close(started)
			<-ctx.Done()
			sawDone.Store(true)
			return nil // finished its work despite the stop: acked
		}, via.opts(js)...)
		<-started
		require.NoError(t, stop())
		assert.True(t, sawDone.Load())
		assert.Zero(t, streamMsgs(t, js, "JOBS"), "the finished job was not acked")
	})
}
