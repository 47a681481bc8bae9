package natsjs_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 24's first failure: a stop Nak'd the messages it held on their
// last delivery, which a work-queue stream then kept for ever, never
// delivered, never dead-lettered, and the error hook heard nothing.
func TestAStopNeverStrandsAMessageOnItsLastDelivery(t *testing.T) {
	t.Parallel()
	const jobs = 4
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 2)
	publishJobs(t, js, jobs)

	// A: one worker; every job fails on delivery 1 and comes back a
	// second later, when all four have failed; on delivery 2, the last,
	// the handler waits for its ctx.
	onLast := make(chan struct{}, jobs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ranA := make(chan error, 1)
	go func() {
		ranA <- natsjs.Run(ctx, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			if md.NumDelivered == 1 {
				return errors.New("first delivery fails")
			}
			onLast <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, natsjs.WithMaxInFlight(jobs), natsjs.WithAhead(jobs-1), natsjs.WithGracePeriod(0),
			natsjs.WithBackoff(func(uint64) time.Duration { return time.Second }))
	}()
	// Every job was delivered twice, and A holds all four: one runs, three
	// wait for the worker, all on their last delivery.
	recv(t, onLast, "a handler on its last delivery")
	if !assert.Eventually(t, func() bool {
		info := consumerInfo(t, cons)
		return info.Delivered.Consumer == 2*jobs && info.NumAckPending == jobs
	}, waitFor, 5*time.Millisecond) {
		t.Fatalf("A does not hold every job on its last delivery: %+v", consumerInfo(t, cons))
	}
	cancel()
	select {
	case err := <-ranA:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("A's Run did not return")
	}

	// A fresh Run gets every job: none was stranded.
	ta := newTally()
	stopB := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	})
	if !assert.Eventually(t, func() bool { return ta.distinct() == jobs }, soon, 5*time.Millisecond) {
		info := consumerInfo(t, cons)
		t.Fatalf("a fresh Run got %d of %d jobs; the stream keeps %d messages, %d ack pending, %d pending",
			ta.distinct(), jobs, streamMsgs(t, js, "JOBS"), info.NumAckPending, info.NumPending)
	}
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "messages left in the stream")
	require.NoError(t, stopB())
	requireEachOnce(t, ta, jobs)
}

func TestAStopRacingLastDeliveriesRepublishesWhatItCannotFinish(t *testing.T) {
	t.Parallel()
	const jobs = 60
	s := startServer(t)
	_, js := connect(t, s)
	// MaxDeliver 1: every delivery is the last, so every hand-back of
	// the stop is a re-publication.
	cons := workQueue(t, js, 30*time.Second, 1)
	publishJobs(t, js, jobs)

	done := newTally() // jobs whose handler returned nil, in A or B
	handler := func(ctx context.Context, msg jetstream.Msg) error {
		select {
		case <-time.After(5 * time.Millisecond):
			done.add(msg)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var hook hookLog
	stopA := consuming(t, newPool(t, 2), js, cons, handler, natsjs.WithAhead(10), natsjs.WithGracePeriod(0), hook.option())
	eventually(t, func() bool { return done.distinct() >= jobs/4 }, "A handled nothing")
	require.NoError(t, stopA())
	finishedA := done.distinct()
	for _, he := range hook.handlerErrors() {
		assert.True(t, he.Stopped && !he.Final, "%v", he)
	}

	// B gets every job A did not finish: the copies of those A held.
	var copies atomic.Int32
	stopB := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if msg.Headers().Get("Natsjs-Republished-From") != "" {
			copies.Add(1)
			assert.Equal(t, string(msg.Data()), msg.Headers().Get("Natsjs-Original-Msg-Id"))
		}
		return handler(ctx, msg)
	})
	eventually(t, func() bool { return done.distinct() == jobs }, "jobs lost")
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "messages left in the stream")
	require.NoError(t, stopB())
	requireEachOnce(t, done, jobs)
	assert.Positive(t, copies.Load(), "A's stop re-published nothing: the attack missed")
	t.Logf("A finished %d jobs; B got %d copies", finishedA, copies.Load())
}

func TestALastDeliveryTheStopCannotHandBackOutsideAWorkQueueIsDeadLetteredOrReported(t *testing.T) {
	t.Parallel()
	for _, withDeadLetter := range []bool{true, false} {
		name := "without a dead-letter subject"
		if withDeadLetter {
			name = "with a dead-letter subject"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			_, js := connect(t, s)
			// A limits stream: a copy published to the subject would reach
			// every consumer of the stream.
			_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LOGS", Subjects: []string{"logs.>"}})
			require.NoError(t, err)
			_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
			require.NoError(t, err)
			cons, err := js.CreateOrUpdateConsumer(context.Background(), "LOGS", jetstream.ConsumerConfig{
				Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1,
			})
			require.NoError(t, err)
			_, err = js.Publish(context.Background(), "logs.1", []byte("x"))
			require.NoError(t, err)

			var hook hookLog
			opts := []natsjs.Option{natsjs.WithGracePeriod(0), natsjs.WithSettleTimeout(time.Second), hook.option()}
			if withDeadLetter {
				opts = append(opts, natsjs.WithDeadLetter(js, "dead.logs"))
			}
			started := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() {
				ran <- natsjs.Run(ctx, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
					close(started)
					<-ctx.Done()
					return ctx.Err()
				}, opts...)
			}()
			select {
			case <-started:
			case err := <-ran:
				t.Fatalf("Run returned before its handler started: %v", err)
			}
			cancel()
			err = recv(t, ran, "Run")
			if withDeadLetter {
				require.NoError(t, err)
				assert.Equal(t, uint64(1), streamMsgs(t, js, "DEAD"))
				dead, err := js.Stream(context.Background(), "DEAD")
				require.NoError(t, err)
				raw, err := dead.GetMsg(context.Background(), 1)
				require.NoError(t, err)
				assert.Equal(t, "natsjs: the stop came on its last delivery", raw.Header.Get("Natsjs-Error"))
				return
			}
			require.ErrorIs(t, err, natsjs.ErrNotConfirmed)
			var me *natsjs.MessageError
			for _, e := range hook.all() {
				errors.As(e, &me)
			}
			require.NotNil(t, me, "the error handler was not told")
			assert.Equal(t, "republish", me.Op)
			assert.Equal(t, uint64(1), me.Sequence)
		})
	}
}

// Issue 31's third failure: with MaxDeliver 2, a delivery that failed only
// because of the stop, and one that waited, never started, when the stop
// came, each cost the message a delivery: the next process's first real
// attempt was the last, and one failure dead-lettered it. A stop costs no
// attempt: both get their two.
func TestAStopCostsTheMessagesItHandsBackNoAttempt(t *testing.T) {
	t.Parallel()
	const jobs, maxDeliver = 2, 2
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, maxDeliver)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	publishJobs(t, js, jobs)

	// A: one worker runs one job until the stop cancels its ctx; the
	// other job waits for the worker.
	started := make(chan struct{}, jobs)
	stopA := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithAhead(jobs-1), natsjs.WithGracePeriod(0))
	recv(t, started, "A's handler")
	eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == jobs }, "A does not hold both jobs")
	require.NoError(t, stopA())

	// B: each job fails once, then succeeds.
	ta := newTally()
	var hook hookLog
	stopB := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		if ta.snapshot()[string(msg.Data())] == 1 {
			return errors.New("first real attempt fails")
		}
		return nil
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }), natsjs.WithDeadLetter(js, "dead.jobs"), hook.option())
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
	require.NoError(t, stopB())
	assert.Equal(t, map[string]int{"0": 2, "1": 2}, ta.snapshot(), "a job did not get MaxDeliver real attempts")
	assert.Zero(t, streamMsgs(t, js, "DEAD"), "a job was dead-lettered")
	for _, he := range hook.handlerErrors() {
		assert.Equal(t, uint64(1), he.Delivery, "%v", he)
		assert.False(t, he.Final, "%v", he)
	}
	assert.Len(t, hook.handlerErrors(), jobs)
}

// What a stop hands back keeps its progress messages until it is
// settled: a copy may take longer than AckWait to be stored, and the
// server must not deliver the message meanwhile to another process, which
// would handle it, and then its copy. Here the stopping process's copies
// reach the server two AckWaits late, while another process pulls.
func TestWhatAStopHandsBackKeepsItsProgressWhileItsCopyIsPublished(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, time.Second, 5)
	publishJobs(t, js, 2)

	proxy, slowJS := heldCopies(t, s, 2*time.Second)

	// The stopping process: job 0 runs until the stop cuts it (no grace
	// period), job 1 waits behind it; each try of a copy waits 5 s for its
	// answer.
	started := make(chan struct{}, 2)
	stopA := consuming(t, newPool(t, 1), slowJS, cons, func(ctx context.Context, msg jetstream.Msg) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithGracePeriod(0), natsjs.WithAhead(2), natsjs.WithSettleTimeout(20*time.Second))
	recv(t, started, "job 0's handler did not start")
	eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == 2 }, "the first process does not hold both jobs")

	ta := newTally()
	stopB := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	})
	require.NoError(t, stopA())
	require.Positive(t, proxy.held.Load(), "no copy went through the proxy")
	eventually(t, func() bool { return ta.distinct() == 2 && streamEmpty(js, "JOBS") }, "the jobs were not handed back")
	require.NoError(t, stopB())
	assert.Equal(t, map[string]int{"0": 1, "1": 1}, ta.snapshot(), "a job handed back was delivered again while its copy was published")
}

// Every rolling deploy stops Run: a message caught by three stops in a
// row, running or queued, still gets all its attempts, and a copy's
// attempts count on from the message's (the attempt a HandlerError says,
// and the last one, where it is final).
func TestAMessageCaughtByEveryStopOfARollingDeployKeepsItsAttempts(t *testing.T) {
	t.Parallel()
	const maxDeliver = 3
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, maxDeliver)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	publishJobs(t, js, 2)

	// Attempt 1 fails before the deploy begins; the jobs come back 300ms
	// later, to the processes of the deploy.
	var hook hookLog
	failed := make(chan struct{}, 2)
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		failed <- struct{}{}
		return errors.New("attempt 1 fails")
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 300 * time.Millisecond }), hook.option())
	recv(t, failed, "attempt 1")
	recv(t, failed, "attempt 1")
	require.NoError(t, stop())

	// Three processes in a row each take both jobs, one running, one
	// queued, and are stopped: the running handler fails because of it.
	for deploy := range 3 {
		started := make(chan struct{}, 2)
		stopN := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, natsjs.WithAhead(1), natsjs.WithGracePeriod(0), hook.option())
		recv(t, started, "a handler of deploy "+strconv.Itoa(deploy))
		eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == 2 }, "deploy does not hold both jobs")
		require.NoError(t, stopN())
	}

	// The last process: attempts 2 and 3 fail; 3 is the last: final.
	var attempts atomic.Int32
	stopB := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		attempts.Add(1)
		return errors.New("fails again")
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }), natsjs.WithDeadLetter(js, "dead.jobs"), hook.option())
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 2 && streamEmpty(js, "JOBS") }, "the jobs were not dead-lettered")
	require.NoError(t, stopB())
	assert.Equal(t, int32(2*(maxDeliver-1)), attempts.Load(), "the stops cost attempts")
	var attempted []uint64
	for _, he := range hook.handlerErrors() {
		if !he.Stopped {
			attempted = append(attempted, he.Delivery)
		}
		if he.Final {
			assert.Equal(t, uint64(maxDeliver), he.Delivery, "%v", he)
		}
	}
	assert.ElementsMatch(t, []uint64{1, 1, 2, 2, 3, 3}, attempted, "the attempts the HandlerErrors said")
	dead, err := js.Stream(context.Background(), "DEAD")
	require.NoError(t, err)
	for seq := uint64(1); seq <= 2; seq++ {
		raw, err := dead.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(maxDeliver), raw.Header.Get("Natsjs-Deliveries"))
		assert.Contains(t, []string{"1", "2"}, raw.Header.Get("Natsjs-Republished-From"), "the dead letter does not name the first original")
	}
}

// Issue 37's first failure: in a work queue that keeps the latest job of
// each subject (MaxMsgsPerSubject 1), v1 runs, v2 is stored (the stream
// holds v2 only), and the process stops: v1's copy, published to its
// subject, pushed v2 out, and the stale v1 ran next. A copy takes its
// message's place, never a newer message's: v1 is superseded.
func TestAStopsCopyNeverReplacesANewerMessageOfItsSubject(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy, MaxMsgsPerSubject: 1,
	})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 3,
	})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.a", []byte("v1"))
	require.NoError(t, err)

	started := make(chan struct{}, 1)
	var hook hookLog
	stopA := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithGracePeriod(0), hook.option())
	recv(t, started, "v1's handler")
	_, err = js.Publish(context.Background(), "jobs.a", []byte("v2"))
	require.NoError(t, err)
	require.NoError(t, stopA())
	var superseded bool
	for _, e := range hook.all() {
		superseded = superseded || errors.Is(e, natsjs.ErrSuperseded)
	}
	assert.True(t, superseded, "the error handler was not told that v1 was superseded")

	ta := newTally()
	stopB := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	})
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stopB())
	assert.Equal(t, map[string]int{"v2": 1}, ta.snapshot(), "the newer job was lost, or the stale one ran")
}

// The same root with DiscardNewPerSubject: the stream refuses the copy
// while the message it copies is stored. On the last delivery, where a
// Nak would strand it, the stop dead-letters it instead.
func TestAStopOnTheLastDeliveryInAStreamThatRefusesTheCopyDeadLettersIt(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy,
		MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
	})
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 1,
	})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.a", []byte("v1"))
	require.NoError(t, err)

	started := make(chan struct{}, 1)
	stopA := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithGracePeriod(0), natsjs.WithDeadLetter(js, "dead.jobs"))
	recv(t, started, "the handler")
	require.NoError(t, stopA(), "the stop left the job stranded")
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 && streamEmpty(js, "JOBS") }, "the job was not dead-lettered")
	dead, err := js.Stream(context.Background(), "DEAD")
	require.NoError(t, err)
	raw, err := dead.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	assert.Equal(t, "v1", string(raw.Data))
	assert.Contains(t, raw.Header.Get("Natsjs-Error"), "last delivery")
}

// With a per-subject limit above 1, a full subject pushes out its oldest
// message when another is stored: a copy published there would push out
// an older job, which no one ran. The copy is not published; the stop
// Naks the message instead, which costs it a delivery but loses nothing.
func TestAStopsCopyPushesOutNoOlderMessageOfAFullSubject(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy, MaxMsgsPerSubject: 2,
	})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 3,
	})
	require.NoError(t, err)
	for _, job := range []string{"older", "cut"} {
		_, err = js.Publish(context.Background(), "jobs.a", []byte(job))
		require.NoError(t, err)
	}

	// "older" fails and waits an hour for its retry, in the stream; "cut"
	// runs until the stop.
	started := make(chan struct{}, 1)
	var hook hookLog
	stopA := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if string(msg.Data()) == "older" {
			return errors.New("later")
		}
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithGracePeriod(0), natsjs.WithBackoff(func(uint64) time.Duration { return time.Hour }), hook.option())
	recv(t, started, "the handler")
	eventually(t, func() bool { return len(hook.handlerErrors()) == 1 }, "the older job did not fail")
	require.NoError(t, stopA())

	st, err := js.Stream(context.Background(), "JOBS")
	require.NoError(t, err)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter("jobs.a"))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), info.State.Subjects["jobs.a"], "the subject lost a job")
	raw, err := st.GetMsg(context.Background(), 1)
	require.NoError(t, err, "the older job was pushed out")
	assert.Equal(t, "older", string(raw.Data))
}

// fullStream creates the work-queue stream JOBS with cfg's limits, and
// its consumer, with three attempts, and stores "older" on jobs.a then
// "cut" on jobs.b.
func fullStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, jetstream.Consumer) {
	t.Helper()
	cfg.Name, cfg.Subjects, cfg.Retention = "JOBS", []string{"jobs.>"}, jetstream.WorkQueuePolicy
	st, err := js.CreateStream(context.Background(), cfg)
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 3,
	})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.a", []byte("older"))
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.b", []byte("cut"))
	require.NoError(t, err)
	return st, cons
}

// stopWhileOlderWaits runs "older", which fails and waits an hour for its
// retry, in the stream, and "cut", which runs until the stop; it stops
// Run and returns what Run returned.
func stopWhileOlderWaits(t *testing.T, js jetstream.JetStream, cons jetstream.Consumer, hook *hookLog, opts ...natsjs.Option) error {
	t.Helper()
	started := make(chan struct{}, 1)
	opts = append([]natsjs.Option{natsjs.WithGracePeriod(0), natsjs.WithBackoff(func(uint64) time.Duration { return time.Hour }), hook.option()}, opts...)
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if string(msg.Data()) == "older" {
			return errors.New("later")
		}
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, opts...)
	recv(t, started, "the handler")
	eventually(t, func() bool { return len(hook.handlerErrors()) == 1 }, "the older job did not fail")
	return stop()
}

// In a work queue bounded by MaxMsgs or MaxBytes that drops its oldest
// message to store a new one (DiscardOld), a copy stored while the stream
// is full would push out the oldest message of the stream, of any
// subject: here "older", a job waiting for its retry, which no one ran.
// The copy is not published; the stop Naks the message instead, which
// costs it a delivery but loses nothing.
func TestAStopsCopyNeverPushesOutAnOlderJobOfAFullStream(t *testing.T) {
	t.Parallel()
	cases := map[string]jetstream.StreamConfig{
		"MaxMsgs 2":                         {MaxMsgs: 2},
		"MaxMsgs 2 and MaxMsgsPerSubject 5": {MaxMsgs: 2, MaxMsgsPerSubject: 5},
		"MaxMsgs 2 and MaxMsgsPerSubject 1": {MaxMsgs: 2, MaxMsgsPerSubject: 1},
		"MaxBytes 256":                      {MaxBytes: 256},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			_, js := connect(t, s)
			st, cons := fullStream(t, js, cfg)
			var hook hookLog
			runErr := stopWhileOlderWaits(t, js, cons, &hook)

			raw, err := st.GetMsg(context.Background(), 1)
			require.NoError(t, err, "the stop's copy of \"cut\" pushed the older job, which never ran, out of the stream (Run returned %v; reports %v)", runErr, hook.all())
			assert.Equal(t, "older", string(raw.Data))
			info, err := st.Info(context.Background())
			require.NoError(t, err)
			assert.Equal(t, uint64(2), info.State.Msgs, "the stream lost a job, or holds a copy too: %+v", info.State)
		})
	}
}

// A full stream whose oldest message is the one a stop hands back has
// room for its copy: what the copy pushes out is the message itself. The
// copy takes its place, with no Nak and no report.
func TestAStopsCopyTakesThePlaceOfTheOldestMessageOfAFullStream(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy, MaxMsgs: 2,
	})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 3,
	})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.b", []byte("cut"))
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.a", []byte("older"))
	require.NoError(t, err)
	var hook hookLog
	require.NoError(t, stopWhileOlderWaits(t, js, cons, &hook))

	assert.Len(t, hook.all(), 2, "only the handlers' failures are reported: %v", hook.all())
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	assert.Equal(t, uint64(2), info.State.Msgs, "the stream holds the waiting job and the copy: %+v", info.State)
	raw, err := st.GetMsg(context.Background(), 2)
	require.NoError(t, err, "the copy pushed out the waiting job")
	assert.Equal(t, "older", string(raw.Data))
	raw, err = st.GetMsg(context.Background(), 3)
	require.NoError(t, err, "the copy was not stored")
	assert.Equal(t, "cut", string(raw.Data))
	assert.Equal(t, "1", raw.Header.Get("Natsjs-Republished-From"))
}

// A stream that discards new messages when full (DiscardNew) refuses the
// copy itself. That refusal is final: the stop Naks the message at once,
// rather than publish the copy again for the settle timeout.
func TestAStopsCopyRefusedByAFullStreamThatDiscardsNewIsNakdAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	st, cons := fullStream(t, js, jetstream.StreamConfig{MaxMsgs: 2, Discard: jetstream.DiscardNew})
	var hook hookLog
	const settle = 10 * time.Second
	start := time.Now()
	runErr := stopWhileOlderWaits(t, js, cons, &hook, natsjs.WithSettleTimeout(settle))
	took := time.Since(start)
	require.NoError(t, runErr)
	assert.Less(t, took, settle/2, "the refused copy was published again for the settle timeout (reports %v)", hook.all())
	var me *natsjs.MessageError
	var refused bool
	for _, err := range hook.all() {
		if errors.As(err, &me) && me.Op == "republish" {
			refused = true
		}
	}
	assert.True(t, refused, "the refused copy was not reported: %v", hook.all())
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	assert.Equal(t, uint64(2), info.State.Msgs, "the stream lost a job: %+v", info.State)
}

// stopWithSlowCopies runs job 0 in a work queue through a proxy that
// holds the publications to its subjects for hold, stops Run while the
// handler runs, and returns what Run returned. Run's settle timeout is
// settle; a try of the copy's publication lasts a second.
func stopWithSlowCopies(t *testing.T, hold, settle time.Duration, hook *hookLog) (jetstream.JetStream, jetstream.Consumer, error) {
	t.Helper()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 5)
	publishJobs(t, js, 1)
	_, slowJS := heldCopies(t, s, hold)
	started := make(chan struct{}, 2)
	stop := consuming(t, newPool(t, 1), slowJS, cons, func(ctx context.Context, msg jetstream.Msg) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithGracePeriod(0), natsjs.WithSettleTimeout(settle), hook.option())
	recv(t, started, "the handler")
	return js, cons, stop()
}

// A stop's copy whose publication no try saw answered within the settle
// timeout may still be stored: no one can know. The stop Naks the message
// all the same, lest it be lost, and says so: Run returns ErrNotConfirmed,
// and the error handler hears it. The job then runs at most twice (the
// original and the copy stored late), never zero times.
func TestAStopsCopyNotConfirmedInTimeIsReportedAndItsJobRunsAtMostTwice(t *testing.T) {
	t.Parallel()
	var hook hookLog
	// One try of a second, whose publication reaches the server a second
	// after the stop has looked for the copy and Nak'd the message.
	js, cons, runErr := stopWithSlowCopies(t, 2*time.Second, time.Second, &hook)
	require.ErrorIs(t, runErr, natsjs.ErrNotConfirmed, "a copy that was not confirmed was not reported by Run (reports %v)", hook.all())
	var heard bool
	for _, err := range hook.all() {
		var me *natsjs.MessageError
		if errors.As(err, &me) && me.Op == "republish" && errors.Is(err, natsjs.ErrNotConfirmed) {
			heard = true
		}
	}
	assert.True(t, heard, "the error handler did not hear of the copy not confirmed: %v", hook.all())

	st, err := js.Stream(context.Background(), "JOBS")
	require.NoError(t, err)
	eventually(t, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.LastSeq >= 2
	}, "the held copy never reached the stream")
	ta := newTally()
	stopB := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	})
	eventually(t, func() bool { return ta.distinct() == 1 && streamEmpty(js, "JOBS") }, "the job was lost")
	require.NoError(t, stopB())
	n := ta.snapshot()["0"]
	assert.GreaterOrEqual(t, n, 1, "the job was lost")
	assert.LessOrEqual(t, n, 2, "the job ran more than twice")
}

// A stop's copy whose tries all timed out, but which reached the stream
// before the settle timeout ran out, is found there (the last message of
// its subject, by its Nats-Msg-Id) before the stop falls back to a Nak:
// the message is terminated, the job runs once, and Run returns nil.
func TestAStopsCopyStoredAfterItsTriesTimedOutIsFoundAndItsJobRunsOnce(t *testing.T) {
	t.Parallel()
	var hook hookLog
	// Tries of a second for two seconds; the first publication reaches
	// the server after 1.5 s.
	js, cons, runErr := stopWithSlowCopies(t, 1500*time.Millisecond, 2*time.Second, &hook)
	require.NoError(t, runErr, "the copy stored was not found (reports %v)", hook.all())
	st, err := js.Stream(context.Background(), "JOBS")
	require.NoError(t, err)
	_, err = st.GetMsg(context.Background(), 1)
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "the stop Nak'd the job as well as copying it (reports %v)", hook.all())
	raw, err := st.GetMsg(context.Background(), 2)
	require.NoError(t, err, "the copy is not stored")
	assert.Equal(t, "1", raw.Header.Get("Natsjs-Republished-From"))
	ta := newTally()
	stopB := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	})
	eventually(t, func() bool { return ta.distinct() == 1 && streamEmpty(js, "JOBS") }, "the job was lost")
	require.NoError(t, stopB())
	assert.Equal(t, map[string]int{"0": 1}, ta.snapshot(), "the stop handed the job back twice")
}

// With MaxMsgsPerSubject 1 or 2, or DiscardNewPerSubject, a stop of the
// only message of its subject loses nothing and reports no failure but
// the handler's; the next Run has it once.
func TestAStopsCopyOfTheOnlyMessageOfItsSubjectLosesNothing(t *testing.T) {
	t.Parallel()
	cases := map[string]jetstream.StreamConfig{
		"per subject 1":              {MaxMsgsPerSubject: 1},
		"per subject 2":              {MaxMsgsPerSubject: 2},
		"per subject 1, discard new": {MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			_, js := connect(t, s)
			cfg.Name, cfg.Subjects, cfg.Retention = "JOBS", []string{"jobs.>"}, jetstream.WorkQueuePolicy
			_, err := js.CreateStream(context.Background(), cfg)
			require.NoError(t, err)
			cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
				Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 3,
			})
			require.NoError(t, err)
			_, err = js.Publish(context.Background(), "jobs.a", []byte("only"))
			require.NoError(t, err)
			started := make(chan struct{}, 2)
			var hook hookLog
			stopA := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				started <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}, natsjs.WithGracePeriod(0), hook.option())
			recv(t, started, "the handler")
			require.NoError(t, stopA())
			if name != "per subject 1, discard new" {
				assert.Len(t, hook.all(), len(hook.handlerErrors()), "unexpected reports: %v", hook.all())
			}
			got := make(chan uint64, 2)
			stopB := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				md, _ := msg.Metadata()
				got <- md.NumDelivered
				return nil
			})
			recv(t, got, "the job handed back was lost")
			eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "left")
			require.NoError(t, stopB())
			assert.Empty(t, got, "handled twice")
		})
	}
}
