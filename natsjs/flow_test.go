package natsjs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNeverMoreThanMaxInFlightMessagesAreHeld(t *testing.T) {
	t.Parallel()
	const jobs = 40
	// Each runner would have jobs messages ahead of it: only the bound
	// holds Run back; without one, it holds what its runners run and what
	// they have ahead of them.
	cases := []struct {
		name        string
		workers     int
		maxInFlight int // 0: none
		ahead       int
	}{
		{"one worker, one in flight", 1, 1, jobs},
		{"fewer workers than in flight", 2, 5, jobs},
		{"more workers than in flight", 8, 3, jobs},
		{"no bound", 3, 0, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each its own server
			// Run fills the bound. Without one, it pulls for its queue
			// once half of what its runners should have ahead is missing:
			// it holds between that and all of it.
			bound, fill := tc.maxInFlight, tc.maxInFlight
			opts := []natsjs.Option{natsjs.WithAhead(tc.ahead)}
			if bound == 0 {
				bound = tc.workers * (1 + tc.ahead)
				fill = tc.workers + (tc.workers*tc.ahead+1)/2
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
			stop := consuming(t, newPool(t, tc.workers), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
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
			}, opts...)

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
				return int(running.Load()) == min(tc.workers, bound) && peakPending.Load() >= int64(fill)
			}, "the process did not fill its bound")
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free) // before Run's, which waits for the handlers
			// Whatever the timing, the blocked process stays at its bound.
			for range 20 {
				assert.LessOrEqual(t, consumerInfo(t, cons).NumAckPending, bound)
				time.Sleep(10 * time.Millisecond)
			}
			// Without a bound, what Run holds grows once its handlers turn
			// out fast: only what it held while they blocked is bounded.
			peakBlocked := peakPending.Load()
			free()
			eventually(t, func() bool { return ta.distinct() == jobs }, "not every job handled")
			close(watchDone)
			watch.Wait()
			require.NoError(t, stop())

			assert.LessOrEqual(t, peakBlocked, int64(bound), "held more than the bound while the handlers blocked")
			if tc.maxInFlight > 0 {
				assert.LessOrEqual(t, peakPending.Load(), int64(bound), "held more than the bound")
			}
			assert.Equal(t, int32(min(tc.workers, bound)), peakRunning.Load())
			requireEachOnce(t, ta, jobs)
		})
	}
}

func TestAMessageWaitingOrRunningLongerThanAckWaitIsNotRedelivered(t *testing.T) {
	t.Parallel()
	const ackWait, jobs = 3 * time.Second, 2
	// One worker; each job runs for 1.5 AckWaits: the second waits in
	// Run's queue for as long.
	// A pool whose queue is bounded holds Run's runners, not its
	// messages: whatever its overflow policy, they wait in Run's queue.
	cases := []struct {
		name string
		opts []workerpool.Option
	}{
		{"unbounded queue", nil},
		{"bounded queue that blocks", []workerpool.Option{workerpool.WithMaxWaiting(1)}},
		{"bounded queue that rejects", []workerpool.Option{workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.Reject)}},
		{"bounded queue whose caller runs", []workerpool.Option{workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits on AckWaits, not on the CPU
			s := startServer(t)
			_, js := connect(t, s)
			cons := workQueue(t, js, ackWait, 0)
			publishJobs(t, js, jobs)

			ta := newTally()
			// Progress every 250ms rather than the default second, so that
			// a loaded machine that starves the process (one P under
			// -cpu 1, seven other tests and their servers) for two seconds
			// does not have a held message redelivered: what is tested is
			// that waiting and running messages get progress at all.
			stop := consuming(t, newPool(t, 1, tc.opts...), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				ta.add(msg)
				time.Sleep(ackWait * 3 / 2)
				return nil
			}, natsjs.WithAhead(jobs), natsjs.WithProgressInterval(250*time.Millisecond))

			eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs not all acked")
			require.NoError(t, stop())
			requireEachOnce(t, ta, jobs)
			assert.Zero(t, consumerInfo(t, cons).NumRedelivered, "a held message was redelivered")
		})
	}
}

// Progress messages that reach the server later than AckWait (a process
// starved of CPU, a slow link) let it deliver a held message again, into
// one of Run's own pulls. Run recognizes it: the handler in charge goes on,
// alone, and settles the message on the latest delivery, which says the
// server's count. Here the progress messages reach the server 1.5 AckWaits
// late, and the server delivers job 0 again while its handler runs; job 1,
// delivered after that, is handled while job 0's handler still runs: the
// redelivery, which came first, would have been handled before it.
func TestARedeliveryOfAMessageRunHoldsNeverRunsItsHandlerAgain(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		maxDeliver int
		result     error // what job 0's handler returns once released
	}{
		{"the handler succeeds", 0, nil},
		// Settled on the first delivery's count, the failure would be
		// Nak'd, and, the server having no delivery left, stranded.
		{"the handler fails on the server's last delivery", 2, errors.New("boom")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // waits on AckWaits, not the CPU
			const ackWait = time.Second
			s := startServer(t)
			_, js := connect(t, s)
			cons := workQueue(t, js, ackWait, tc.maxDeliver)
			proxy := startHoldingProxy(t, s.Addr().String(), ackWait*3/2, progressMessages)
			nc, err := nats.Connect(proxy.url())
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			slowJS, err := jetstream.New(nc)
			require.NoError(t, err)

			ta := newTally()
			started, release, handled := make(chan struct{}), make(chan struct{}), make(chan string, 4)
			var lastDelivery atomic.Uint64 // as job 0's handler sees it when released
			var hook hookLog
			stop := consuming(t, newPool(t, 2), slowJS, cons, func(ctx context.Context, msg jetstream.Msg) error {
				ta.add(msg)
				defer func() { handled <- string(msg.Data()) }()
				if string(msg.Data()) != "0" {
					return nil
				}
				close(started) // a second run of job 0's handler panics here
				select {
				case <-release:
				case <-time.After(waitFor):
				}
				md, err := msg.Metadata()
				require.NoError(t, err)
				lastDelivery.Store(md.NumDelivered)
				return tc.result
			}, hook.option())

			publishJobs(t, js, 1)
			recv(t, started, "job 0's handler did not start")
			eventually(t, func() bool { return consumerInfo(t, cons).Delivered.Consumer >= 2 },
				"the server did not deliver job 0 again")
			_, err = js.Publish(context.Background(), "jobs.1", []byte("1"))
			require.NoError(t, err)
			assert.Equal(t, "1", recv(t, handled, "job 1 was not handled"), "job 0 was handled again")
			close(release)
			assert.Equal(t, "0", recv(t, handled, "job 0's handler did not return"))
			eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "a job was left in the stream")
			require.NoError(t, stop())

			assert.Equal(t, map[string]int{"0": 1, "1": 1}, ta.snapshot())
			assert.GreaterOrEqual(t, lastDelivery.Load(), uint64(2), "the handler's message does not say the latest delivery")
			hes := hook.handlerErrors()
			assert.Len(t, hook.all(), len(hes), "Run reported more than handler failures: %v", hook.all())
			if tc.result != nil {
				require.Len(t, hes, 1)
				assert.True(t, hes[0].Final, "a failure on the server's last delivery was not final")
				assert.Equal(t, uint64(2), hes[0].Delivery)
			}
			info := consumerInfo(t, cons)
			assert.Zero(t, info.NumAckPending, "a delivery was left unsettled")
		})
	}
}

// Issue 24's second failure: a Run on a pool busy with other work took
// messages it could not start and kept them with progress messages: with
// a small MaxAckPending, every other process starved.
func TestARunOnABusyPoolHoldsNothingAndStallsNoOtherProcess(t *testing.T) {
	t.Parallel()
	const jobs = 20
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy,
	})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 4,
	})
	require.NoError(t, err)

	// A's pool of 2 is busy with two long tasks of other work.
	busy := newPool(t, 2)
	release := make(chan struct{})
	defer close(release)
	for range 2 {
		require.NoError(t, busy.Submit(func() { <-release }))
	}
	ranA := make(chan string, jobs)
	stopA := consuming(t, busy, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ranA <- string(msg.Data())
		return nil
	})
	publishJobs(t, js, jobs)

	// B, on an idle pool of 8, handles every job meanwhile.
	tb := newTally()
	stopB := consuming(t, newPool(t, 8), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		tb.add(msg)
		return nil
	})
	if !assert.Eventually(t, func() bool { return tb.distinct() == jobs }, 10*time.Second, 5*time.Millisecond) {
		info := consumerInfo(t, cons)
		t.Fatalf("B handled %d of %d jobs while A's pool was busy; %d ack pending", tb.distinct(), jobs, info.NumAckPending)
	}
	require.NoError(t, stopB())
	require.NoError(t, stopA())
	assert.Len(t, ranA, 0, "A ran a job while its pool was busy")
	requireEachOnce(t, tb, jobs)
}

func TestARunWhoseHandlersAreLongHoldsOnlyWhatTheyRun(t *testing.T) {
	t.Parallel()
	const jobs = 20
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy,
	})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 4,
	})
	require.NoError(t, err)
	publishJobs(t, js, jobs)

	// A's two handlers block: A holds them, and nothing more.
	release := make(chan struct{})
	startedA := make(chan string, jobs)
	stopA := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		startedA <- string(msg.Data())
		<-release
		return nil
	})
	recv(t, startedA, "A's first handler")
	recv(t, startedA, "A's second handler")
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)

	// B gets the two slots of MaxAckPending A leaves, and every other job.
	tb := newTally()
	stopB := consuming(t, newPool(t, 8), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		tb.add(msg)
		return nil
	})
	eventually(t, func() bool { return tb.distinct() == jobs-2 }, "B starved while A's handlers ran")
	// Once B's acks are in, what is pending is what A's handlers run.
	eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == 2 }, "A holds more than its running handlers")
	free()
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
	require.NoError(t, stopA())
	require.NoError(t, stopB())
}

func TestTwoRunsOnOnePoolShareItAndStopApart(t *testing.T) {
	t.Parallel()
	const jobs = 400
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	p := newPool(t, 4)
	var running, peak atomic.Int32
	ta := newTally()
	h := func(ctx context.Context, msg jetstream.Msg) error {
		n := running.Add(1)
		defer running.Add(-1)
		for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
		}
		time.Sleep(time.Millisecond)
		ta.add(msg)
		return nil
	}
	stopA := consuming(t, p, js, cons, h)
	stopB := consuming(t, p, js, cons, h)
	eventually(t, func() bool { return ta.distinct() >= jobs/4 }, "the Runs handled nothing")
	require.NoError(t, stopA())
	// B goes on alone, and gets what A handed back.
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left after A stopped")
	require.NoError(t, stopB())
	requireEachOnce(t, ta, jobs)
	assert.LessOrEqual(t, peak.Load(), int32(4), "more handlers ran than the pool has workers")
}

func TestRunFollowsAResizeOfItsPool(t *testing.T) {
	t.Parallel()
	const jobs = 8
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	p := newPool(t, 1)
	release := make(chan struct{})
	var running atomic.Int32
	stop := consuming(t, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		running.Add(1)
		<-release
		return nil
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	eventually(t, func() bool { return running.Load() == 1 }, "no handler ran")
	p.Resize(4)
	eventually(t, func() bool { return running.Load() == 4 }, "Run did not use the workers Resize added")
	assert.Equal(t, 4, consumerInfo(t, cons).NumAckPending, "Run held more than its running handlers")
	free()
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
	require.NoError(t, stop())
}

func TestRunOnASubpoolKeepsItsLimitAndTheRestOfThePoolFree(t *testing.T) {
	t.Parallel()
	const jobs, limit = 20, 2
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	p := newPool(t, 8)
	sub := p.Subpool("jobs", limit)
	release := make(chan struct{})
	var running, peak atomic.Int32
	ta := newTally()
	stop := consuming(t, sub, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		n := running.Add(1)
		defer running.Add(-1)
		for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
		}
		<-release
		ta.add(msg)
		return nil
	}, natsjs.WithAhead(1))
	// Run uses the sub-pool's limit, not the pool's size.
	eventually(t, func() bool {
		return running.Load() == limit && consumerInfo(t, cons).NumAckPending == 2*limit
	}, "the sub-pool did not fill its limit and bound")
	// The pool's other workers stay free for other work meanwhile.
	require.NoError(t, p.SubmitWait(func() {}))
	for range 10 {
		assert.LessOrEqual(t, consumerInfo(t, cons).NumAckPending, 2*limit)
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stop())
	requireEachOnce(t, ta, jobs)
	assert.Equal(t, int32(limit), peak.Load(), "more handlers ran at once than the sub-pool's limit")
}

func TestAProgressMessageNeverUndoesTheDelayOfANak(t *testing.T) {
	t.Parallel()
	const jobs = 200
	s := startServer(t)
	_, js := connect(t, s)
	// AckWait 30s, backoff 200ms: a progress message sent after the Nak
	// would make a message come back after 30s rather than 200ms.
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	ta := newTally()
	// Progress every millisecond, for every held message: it races
	// every Nak.
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		require.NoError(t, err)
		if md.NumDelivered == 1 {
			time.Sleep(time.Millisecond)
			return errors.New("first delivery fails")
		}
		ta.add(msg)
		return nil
	}, natsjs.WithProgressInterval(time.Millisecond), natsjs.WithMaxInFlight(jobs),
		natsjs.WithBackoff(func(uint64) time.Duration { return 200 * time.Millisecond }))

	// Far below AckWait: only the Naks' delays can bring them all back.
	require.Eventually(t, func() bool { return ta.distinct() == jobs }, 20*time.Second, 5*time.Millisecond,
		"a failed message came back after AckWait, not its backoff")
	require.NoError(t, stop())
	requireEachOnce(t, ta, jobs)
}

func TestAMessageHeldLongerThanTheConsumersBackOffIsNotRedelivered(t *testing.T) {
	t.Parallel() // waits on the clock, not the CPU
	s := startServer(t)
	_, js := connect(t, s)
	workQueue(t, js, 30*time.Second, 0)
	require.NoError(t, js.DeleteConsumer(context.Background(), "JOBS", "workers"))
	// BackOff replaces AckWait: the server takes its first value as the
	// AckWait, and redelivers an unacked second delivery after the second,
	// 1.5s. v1 sent progress every AckWait/3 = 2s.
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "backoff", AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: 4, BackOff: []time.Duration{6 * time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond},
	})
	require.NoError(t, err)
	publishJobs(t, js, 1)

	var mu sync.Mutex
	var deliveries []uint64
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		require.NoError(t, err)
		mu.Lock()
		deliveries = append(deliveries, md.NumDelivered)
		mu.Unlock()
		if md.NumDelivered == 1 {
			return errors.New("first delivery fails")
		}
		// The second delivery, whose redelivery delay is 1.5s, runs for
		// 4s: the default progress interval must be below 1.5s (it is
		// 500ms, which leaves a loaded machine a second of slack).
		time.Sleep(4 * time.Second)
		return nil
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }))
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []uint64{1, 2}, deliveries, "a held message was redelivered")
}
