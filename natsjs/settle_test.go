package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
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

func TestEveryMessageIsHandledOnceAndAckedLeavingTheStreamEmpty(t *testing.T) {
	t.Parallel()
	const jobs = 300
	pools := []struct {
		name string
		pool func(t *testing.T) *workerpool.Pool
		opts []natsjs.Option
	}{
		{"default", func(t *testing.T) *workerpool.Pool { return newPool(t, 4) }, nil},
		{"one worker, many in flight", func(t *testing.T) *workerpool.Pool { return newPool(t, 1) }, []natsjs.Option{natsjs.WithMaxInFlight(50)}},
		{"many workers, one in flight", func(t *testing.T) *workerpool.Pool { return newPool(t, 16) }, []natsjs.Option{natsjs.WithMaxInFlight(1)}},
		// More than one pull asks for, and than the consumer's default
		// MaxAckPending (1000): the server holds back, nothing breaks.
		{"in flight beyond a pull and MaxAckPending", func(t *testing.T) *workerpool.Pool { return newPool(t, 4) }, []natsjs.Option{natsjs.WithMaxInFlight(5000)}},
		{"bounded queue that blocks", func(t *testing.T) *workerpool.Pool {
			return newPool(t, 2, workerpool.WithMaxWaiting(1))
		}, []natsjs.Option{natsjs.WithMaxInFlight(20)}},
		{"bounded queue that rejects", func(t *testing.T) *workerpool.Pool {
			return newPool(t, 2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.Reject))
		}, []natsjs.Option{natsjs.WithMaxInFlight(20)}},
		{"bounded queue whose caller runs", func(t *testing.T) *workerpool.Pool {
			return newPool(t, 2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
		}, []natsjs.Option{natsjs.WithMaxInFlight(20)}},
		// Key order: each message a task of the pool, whose queue may be
		// bounded too; a byte bound of a few messages.
		{"keys, 7 of them", func(t *testing.T) *workerpool.Pool { return newPool(t, 4) }, []natsjs.Option{natsjs.WithKey(mod7)}},
		{"keys, one worker, one in flight", func(t *testing.T) *workerpool.Pool { return newPool(t, 1) }, []natsjs.Option{natsjs.WithKey(mod7), natsjs.WithMaxInFlight(1)}},
		{"keys, bounded queue that blocks", func(t *testing.T) *workerpool.Pool {
			return newPool(t, 2, workerpool.WithMaxWaiting(1))
		}, []natsjs.Option{natsjs.WithKey(mod7), natsjs.WithMaxInFlight(20)}},
		{"keys, bounded queue that rejects", func(t *testing.T) *workerpool.Pool {
			return newPool(t, 2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.Reject))
		}, []natsjs.Option{natsjs.WithKey(mod7), natsjs.WithMaxInFlight(20)}},
		{"keys, bounded queue whose caller runs", func(t *testing.T) *workerpool.Pool {
			return newPool(t, 2, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns))
		}, []natsjs.Option{natsjs.WithKey(mod7), natsjs.WithMaxInFlight(20)}},
		{"a byte bound of a few messages", func(t *testing.T) *workerpool.Pool { return newPool(t, 4) }, []natsjs.Option{natsjs.WithMaxBytes(300)}},
		{"keys and a byte bound of a few messages", func(t *testing.T) *workerpool.Pool { return newPool(t, 4) }, []natsjs.Option{natsjs.WithKey(mod7), natsjs.WithMaxBytes(300)}},
	}
	for _, tc := range pools {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each its own server
			s := startServer(t)
			_, js := connect(t, s)
			cons := workQueue(t, js, 30*time.Second, 0)
			publishJobs(t, js, jobs)

			ta := newTally()
			stop := consuming(t, tc.pool(t), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				ta.add(msg)
				return nil
			}, tc.opts...)

			eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "stream not emptied")
			require.NoError(t, stop())
			requireEachOnce(t, ta, jobs)
			info := consumerInfo(t, cons)
			assert.Zero(t, info.NumAckPending)
			assert.Zero(t, info.NumRedelivered)
		})
	}
}

// mod7 keys the jobs of publishJobs by their number modulo 7.
func mod7(msg jetstream.Msg) string {
	n, _ := strconv.Atoi(string(msg.Data()))
	return strconv.Itoa(n % 7)
}

func TestAFailedMessageComesBackAfterItsBackoffAndAPanicReachesThePool(t *testing.T) {
	t.Parallel()
	const failures = 2 // deliveries that fail before one succeeds
	backoff := func(delivery uint64) time.Duration { return time.Duration(delivery) * 300 * time.Millisecond }
	for _, kind := range []string{"error", "panic", "goexit"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // waits on backoffs, not the CPU
			s := startServer(t)
			_, js := connect(t, s)
			cons := workQueue(t, js, 30*time.Second, 0)
			publishJobs(t, js, 1)

			var panics atomic.Int32
			p := newPool(t, 2, workerpool.WithPanicHandler(func(*workerpool.PanicError) { panics.Add(1) }))
			var mu sync.Mutex
			var starts, ends []time.Time // of each delivery's handler
			var deliveries []uint64
			stop := consuming(t, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				md, err := msg.Metadata()
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				starts = append(starts, time.Now())
				deliveries = append(deliveries, md.NumDelivered)
				if len(starts) > failures {
					return nil
				}
				ends = append(ends, time.Now())
				switch kind {
				case "panic":
					panic("boom")
				case "goexit":
					runtime.Goexit() // runs the deferred Unlock
				}
				return errors.New("boom")
			}, natsjs.WithBackoff(backoff))

			eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "message never acked")
			require.NoError(t, stop())
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, starts, failures+1)
			assert.Equal(t, []uint64{1, 2, 3}, deliveries)
			for i := range failures {
				gap := starts[i+1].Sub(ends[i])
				assert.GreaterOrEqual(t, gap, backoff(uint64(i+1)), "delivery %d came back before its backoff", i+2)
				// AckWait is 30s: only the Nak can bring it back this soon.
				assert.Less(t, gap, 10*time.Second, "delivery %d came back by AckWait, not by Nak", i+2)
			}
			if kind == "panic" {
				assert.Equal(t, int32(failures), panics.Load())
				assert.Equal(t, uint64(failures), p.Status().Panicked)
			} else {
				assert.Zero(t, panics.Load())
			}

		})
	}
}

func TestAtMaxDeliverWithoutDeadLetterAFailedMessageIsTerminated(t *testing.T) {
	t.Parallel()
	const maxDeliver, jobs = 2, 5
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, maxDeliver)
	publishJobs(t, js, jobs)

	ta := newTally()
	quiet := workerpool.WithPanicHandler(func(*workerpool.PanicError) {})
	stop := consuming(t, newPool(t, 2, quiet), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		panic("always")
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }))

	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "exhausted messages not terminated")
	require.NoError(t, stop())
	for i, n := range ta.snapshot() {
		assert.Equal(t, maxDeliver, n, "job %s", i)
	}
	assert.Equal(t, jobs, ta.distinct())
}

// hookLog collects what a run's error handler is told.
type hookLog struct {
	mu   sync.Mutex
	errs []error
}

func (h *hookLog) option() natsjs.Option {
	return natsjs.WithErrorHandler(func(err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.errs = append(h.errs, err)
	})
}

// all returns what was told so far.
func (h *hookLog) all() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// handlerErrors returns the HandlerErrors told so far.
func (h *hookLog) handlerErrors() []*natsjs.HandlerError {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*natsjs.HandlerError
	for _, err := range h.errs {
		var he *natsjs.HandlerError
		if errors.As(err, &he) {
			out = append(out, he)
		}
	}
	return out
}

func TestTheErrorHandlerHearsEachHandlerFailureWithItsSequenceDeliveryAndFinality(t *testing.T) {
	t.Parallel()
	const maxDeliver = 3
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, maxDeliver)
	publishJobs(t, js, 3)

	// Job 0 returns an error, job 1 panics, job 2 calls runtime.Goexit,
	// on every delivery.
	var hook hookLog
	quiet := workerpool.WithPanicHandler(func(*workerpool.PanicError) {})
	stop := consuming(t, newPool(t, 2, quiet), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		switch string(msg.Data()) {
		case "0":
			return errors.New("job 0 failed")
		case "1":
			panic(fmt.Sprintf("job %s panicked", msg.Data()))
		}
		runtime.Goexit()
		return nil
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }), hook.option())
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "failed messages not terminated")
	require.NoError(t, stop())

	got := make(map[uint64][]*natsjs.HandlerError) // by stream sequence
	for _, he := range hook.handlerErrors() {
		got[he.Sequence] = append(got[he.Sequence], he)
	}
	require.Len(t, got, 3)
	for seq, hes := range got {
		require.Len(t, hes, maxDeliver, "message %d", seq)
		for i, he := range hes {
			assert.Equal(t, "JOBS", he.Stream)
			assert.Equal(t, uint64(i+1), he.Delivery)
			assert.Equal(t, i+1 == maxDeliver, he.Final, "message %d delivery %d", seq, he.Delivery)
			assert.False(t, he.Stopped)
			assert.Contains(t, he.Error(), fmt.Sprintf("JOBS/%d", seq))
		}
	}
	// Sequences 1, 2, 3 hold jobs 0, 1, 2.
	assert.EqualError(t, got[1][0].Err, "job 0 failed")
	var pe *workerpool.PanicError
	require.ErrorAs(t, got[2][0], &pe)
	assert.Equal(t, "job 1 panicked", pe.Value)
	assert.Contains(t, string(pe.Stack), "settle_test.go", "the stack is not the handler's")
	assert.Contains(t, got[3][0].Error(), "runtime.Goexit")
}

// redeliveryGaps runs a handler that fails on every delivery of one job
// until the last of maxDeliver, on a consumer made with cfg, and returns
// the time between each failure and the next delivery.
func redeliveryGaps(t *testing.T, cfg jetstream.ConsumerConfig, opts ...natsjs.Option) []time.Duration {
	t.Helper()
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy,
	})
	require.NoError(t, err)
	cfg.Durable, cfg.AckPolicy = "workers", jetstream.AckExplicitPolicy
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", cfg)
	require.NoError(t, err)
	publishJobs(t, js, 1)

	var mu sync.Mutex
	var gaps []time.Duration
	var failed time.Time
	done := make(chan struct{})
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		mu.Lock()
		defer mu.Unlock()
		if !failed.IsZero() {
			gaps = append(gaps, time.Since(failed))
		}
		md, err := msg.Metadata()
		require.NoError(t, err)
		if md.NumDelivered == uint64(cfg.MaxDeliver) {
			close(done)
			return nil
		}
		failed = time.Now()
		return errors.New("fails")
	}, opts...)
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the last delivery never came")
	}
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	return gaps
}

func TestTheConsumersBackOffIsHonouredWithoutWithBackoff(t *testing.T) {
	t.Parallel()
	// nats-server counts a Nak's delay from BackOff[0] back but waits
	// BackOff[d-1] after delivery d: a Nak asking for 2s after delivery 2
	// would bring it back after 2s + 2s - 200ms. Run corrects it. (The
	// slack, 1.3s, is for a loaded machine.)
	backOff := []time.Duration{200 * time.Millisecond, 2 * time.Second}
	gaps := redeliveryGaps(t, jetstream.ConsumerConfig{MaxDeliver: 3, BackOff: backOff})
	require.Len(t, gaps, 2)
	for i, gap := range gaps {
		assert.GreaterOrEqual(t, gap, backOff[i], "delivery %d came back before the consumer's BackOff", i+2)
		assert.Less(t, gap, backOff[i]+1300*time.Millisecond, "delivery %d came back long after the consumer's BackOff", i+2)
	}
}

func TestWithBackoffOverridesTheConsumersBackOff(t *testing.T) {
	t.Parallel()
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}
	gaps := redeliveryGaps(t, jetstream.ConsumerConfig{MaxDeliver: 3, BackOff: []time.Duration{3 * time.Second, 2 * time.Second}},
		natsjs.WithBackoff(func(d uint64) time.Duration { return want[d-1] }))
	require.Len(t, gaps, 2)
	// The server waits BackOff[1] - BackOff[0] longer than a Nak asks
	// after delivery 2, here 1s less: Run asks for 1.4s to get 400ms.
	// Uncorrected, the second would come back at once; ignored, after the
	// consumer's 2s. (The slack is for a loaded machine.)
	assert.GreaterOrEqual(t, gaps[0], want[0])
	assert.Less(t, gaps[0], want[0]+1500*time.Millisecond)
	assert.GreaterOrEqual(t, gaps[1], want[1])
	assert.Less(t, gaps[1], want[1]+1500*time.Millisecond)
}

// Issue 31's second failure: with a consumer BackOff of [200ms, 3s] and
// WithBackoff asking for 400ms, the second failure came back after 2.8s:
// the correction for the server's own delay stopped at 1ns, where it had
// to ask for less than nothing. nats-server (2.15.2, embedded here) takes
// a negative Nak delay off its own.
func TestWithBackoffShorterThanTheConsumersBackOffIsHonoured(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		backOff []time.Duration
	}{
		// After delivery 2 the server waits 3s: Run asks for -2.4s.
		{"the correction is below zero", []time.Duration{200 * time.Millisecond, 3 * time.Second}},
		// After delivery 2 the server waits 600ms: Run asks for 0, which
		// is a delay too, not a plain Nak that redelivers at once.
		{"the correction is zero", []time.Duration{200 * time.Millisecond, 600 * time.Millisecond}},
	}
	const want = 400 * time.Millisecond
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // waits on backoffs, not the CPU
			gaps := redeliveryGaps(t, jetstream.ConsumerConfig{MaxDeliver: 3, BackOff: tc.backOff},
				natsjs.WithBackoff(func(uint64) time.Duration { return want }))
			require.Len(t, gaps, 2)
			for i, gap := range gaps {
				// The slack is for a loaded machine; the server's own delay
				// after delivery 2 is 600ms or 3s.
				assert.GreaterOrEqual(t, gap, want, "delivery %d came back before WithBackoff's delay", i+2)
				assert.Less(t, gap, want+time.Second, "delivery %d came back after the consumer's BackOff, not WithBackoff's delay", i+2)
			}
		})
	}
}

func TestAPanickingErrorHandlerDoesNotStopRun(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 20)

	ta := newTally()
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		require.NoError(t, err)
		if md.NumDelivered == 1 {
			return errors.New("first delivery fails")
		}
		ta.add(msg)
		return nil
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }),
		natsjs.WithErrorHandler(func(error) { panic("the error handler is broken") }))
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
	require.NoError(t, stop())
	requireEachOnce(t, ta, 20)
}

func TestAHandlerMaySettleItsMessageItself(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 3)

	ta := newTally()
	stop := consuming(t, newPool(t, 2, workerpool.WithPanicHandler(func(*workerpool.PanicError) {})), js, cons,
		func(ctx context.Context, msg jetstream.Msg) error {
			ta.add(msg)
			switch string(msg.Data()) {
			case "0":
				return msg.Term()
			case "1":
				// Acked, then failed: the ack stands.
				require.NoError(t, msg.DoubleAck(ctx))
				return fmt.Errorf("failed after acking")
			default:
				require.NoError(t, msg.Ack())
				panic("panicked after acking")
			}
		}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }))
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "self-settled messages left in the stream")
	require.NoError(t, stop())
	requireEachOnce(t, ta, 3)
}
