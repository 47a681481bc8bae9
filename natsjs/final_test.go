package natsjs_test

import (
	"context"
	"errors"
	"fmt"
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

func TestAtMaxDeliverAFailedMessageIsDeadLetteredThenTerminated(t *testing.T) {
	t.Parallel()
	const maxDeliver, jobs = 3, 4
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, maxDeliver)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	for i := range jobs {
		_, err := js.PublishMsg(context.Background(), &nats.Msg{
			Subject: fmt.Sprintf("jobs.%d", i),
			Data:    []byte(fmt.Sprint(i)),
			Header:  nats.Header{"X-Tenant": {"acme"}, "Nats-Msg-Id": {fmt.Sprint("id-", i)}},
		})
		require.NoError(t, err)
	}

	ta := newTally()
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return fmt.Errorf("job %s: boom\nsecond line", msg.Data())
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }), natsjs.WithDeadLetter(js, "dead.jobs"))

	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == jobs && streamMsgs(t, js, "JOBS") == 0 },
		"failed messages not moved to the dead-letter stream")
	require.NoError(t, stop())
	for i, n := range ta.snapshot() {
		assert.Equal(t, maxDeliver, n, "job %s handled %d times", i, n)
	}
	assert.Equal(t, jobs, ta.distinct())

	dead, err := js.Stream(context.Background(), "DEAD")
	require.NoError(t, err)
	for seq := uint64(1); seq <= jobs; seq++ {
		raw, err := dead.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		job := string(raw.Data)
		assert.Equal(t, "dead.jobs", raw.Subject)
		assert.Equal(t, "acme", raw.Header.Get("X-Tenant"))
		assert.Equal(t, "id-"+job, raw.Header.Get("Natsjs-Original-Msg-Id"))
		// The dead letter's own id, the same for every copy of the
		// message: its stream, sequence and time.
		assert.Regexp(t, `^natsjs-dead:JOBS:`+raw.Header.Get("Natsjs-Sequence")+`:\d+$`, raw.Header.Get("Nats-Msg-Id"))
		assert.Equal(t, "JOBS", raw.Header.Get("Natsjs-Stream"))
		assert.Equal(t, "workers", raw.Header.Get("Natsjs-Consumer"))
		assert.Equal(t, "jobs."+job, raw.Header.Get("Natsjs-Subject"))
		assert.NotEmpty(t, raw.Header.Get("Natsjs-Sequence"))
		assert.Equal(t, fmt.Sprint(maxDeliver), raw.Header.Get("Natsjs-Deliveries"))
		assert.Equal(t, "job "+job+": boom second line", raw.Header.Get("Natsjs-Error"))
	}
}

// deadLetterLater runs h on one job of a work queue whose consumer has
// ackWait and maxDeliver, with a dead-letter subject no stream captures,
// until the error handler has heard of `failures` dead letters that could
// not be published; then it creates the stream DEAD on that subject, and
// waits for the job to get there and leave JOBS. It returns how many
// handlers ran, how many at most at once, what the error handler heard,
// and the dead letter.
func deadLetterLater(t *testing.T, ackWait time.Duration, maxDeliver, failures int, h natsjs.Handler, opts ...natsjs.Option) (handled, peak int32, hook *hookLog, dead *jetstream.RawStreamMsg) {
	t.Helper()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, ackWait, maxDeliver)
	publishJobs(t, js, 1)

	var n, running, top atomic.Int32
	hook = &hookLog{}
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		n.Add(1)
		now := running.Add(1)
		defer running.Add(-1)
		for old := top.Load(); now > old && !top.CompareAndSwap(old, now); old = top.Load() {
		}
		return h(ctx, msg)
	}, append(opts, natsjs.WithDeadLetter(js, "dead.jobs"), hook.option())...)

	unpublished := func() int {
		k := 0
		for _, err := range hook.all() {
			var me *natsjs.MessageError
			if errors.As(err, &me) && me.Op == "dead-letter" {
				k++
			}
		}
		return k
	}
	eventually(t, func() bool { return unpublished() >= failures }, "the dead letters did not fail")
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 && streamEmpty(js, "JOBS") },
		"the message did not reach the dead-letter stream once there was one")
	require.NoError(t, stop())
	st, err := js.Stream(context.Background(), "DEAD")
	require.NoError(t, err)
	dead, err = st.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	return n.Load(), top.Load(), hook, dead
}

// Issue 31's first failure: a Permanent failure whose dead letter could
// not be published (no stream captures its subject) was delivered again
// and again, each time "final", once concurrently with itself: nothing
// kept it from the server while the dead letter was retried, and nothing
// after. Now Run holds it with its progress messages meanwhile, then keeps
// it as a copy whose handler never runs again, until the dead letter can
// be published.
func TestAPermanentFailureWhoseDeadLetterCannotBePublishedIsNeverHandledAgain(t *testing.T) {
	t.Parallel()
	// AckWait 1s, MaxDeliver 5: the dead letters fail for several
	// AckWaits before they can be published.
	handled, peak, hook, dead := deadLetterLater(t, time.Second, 5, 2, func(ctx context.Context, msg jetstream.Msg) error {
		return natsjs.Permanent(errors.New("malformed job"))
	})
	assert.Equal(t, int32(1), handled, "the handler of a permanent failure ran again")
	assert.Equal(t, int32(1), peak)
	hes := hook.handlerErrors()
	require.Len(t, hes, 1)
	assert.True(t, hes[0].Final)
	assert.Equal(t, "malformed job", dead.Header.Get("Natsjs-Error"))
	assert.Equal(t, "1", dead.Header.Get("Natsjs-Deliveries"))
	assert.Equal(t, "0", dead.Header.Get("Natsjs-Original-Msg-Id"), "the dead letter lost the publisher's id")
	// Re-published to its subject, a dead letter is a job like any other.
	assert.Empty(t, dead.Header.Get("Natsjs-Final-Error"))
	assert.Empty(t, dead.Header.Get("Natsjs-Attempts"))
}

// A final failure whose dead letter cannot be published is kept as a
// copy, then terminated: until the term, the message stays held, with its
// progress messages, however long the copy takes to be stored. v3.2
// stopped them before the copy was published: a copy stored more than
// AckWait later left the message to come back, and its handler ran again.
func TestAFinalFailureKeepsItsProgressWhileItsCopyIsPublished(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, time.Second, 5)
	publishJobs(t, js, 1)

	// Run's publications to jobs.> (its copies) reach the server two
	// AckWaits late; each try of a copy waits 5 s for its answer.
	proxy, slowJS := heldCopies(t, s, 2*time.Second)

	var handled atomic.Int32
	hook := &hookLog{}
	stop := consuming(t, newPool(t, 1), slowJS, cons, func(ctx context.Context, msg jetstream.Msg) error {
		handled.Add(1)
		return natsjs.Permanent(errors.New("malformed job"))
	}, natsjs.WithDeadLetter(slowJS, "dead.jobs"), natsjs.WithDeadLetterTimeout(100*time.Millisecond),
		natsjs.WithSettleTimeout(20*time.Second), hook.option())
	// The copy is stored and the original terminated: the work queue
	// holds the copy alone.
	eventually(t, func() bool {
		st, err := js.Stream(context.Background(), "JOBS")
		if err != nil {
			return false
		}
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 1 && info.State.FirstSeq == 2
	}, "the message was not kept as a copy")
	require.Positive(t, proxy.held.Load(), "no copy went through the proxy")
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 && streamEmpty(js, "JOBS") },
		"the copy did not reach the dead-letter stream")
	require.NoError(t, stop())
	assert.Equal(t, int32(1), handled.Load(), "the handler of a final failure ran again")
	assert.Len(t, hook.handlerErrors(), 1)
}

// The same on the last attempt: v3 left the message in its stream, never
// delivered again but never dead-lettered either, even once a stream
// captured the subject.
func TestAMessageWhoseDeadLetterCannotBePublishedIsKeptUntilItCanBe(t *testing.T) {
	t.Parallel()
	handled, peak, hook, dead := deadLetterLater(t, 30*time.Second, 2, 2, func(ctx context.Context, msg jetstream.Msg) error {
		return errors.New("boom")
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }))
	assert.Equal(t, int32(2), handled)
	assert.Equal(t, int32(1), peak)
	hes := hook.handlerErrors()
	require.Len(t, hes, 2)
	assert.False(t, hes[0].Final)
	assert.True(t, hes[1].Final)
	assert.Equal(t, "2", dead.Header.Get("Natsjs-Deliveries"))
	assert.Equal(t, "boom", dead.Header.Get("Natsjs-Error"))
}

func TestAPermanentFailureIsDeadLetteredAtOnceWithoutRetries(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 5)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	publishJobs(t, js, 2)

	bad := errors.New("malformed job")
	ta := newTally()
	var hook hookLog
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		if string(msg.Data()) == "0" {
			return fmt.Errorf("job 0: %w", natsjs.Permanent(bad))
		}
		return natsjs.Permanent(nil)
	}, natsjs.WithDeadLetter(js, "dead.jobs"), hook.option())
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 2 && streamMsgs(t, js, "JOBS") == 0 },
		"permanent failures not dead-lettered")
	require.NoError(t, stop())
	assert.Equal(t, map[string]int{"0": 1, "1": 1}, ta.snapshot(), "a permanent failure was retried")
	hes := hook.handlerErrors()
	require.Len(t, hes, 2)
	for _, he := range hes {
		assert.True(t, he.Final)
		assert.Equal(t, uint64(1), he.Delivery)
	}
	dead, err := js.Stream(context.Background(), "DEAD")
	require.NoError(t, err)
	errs := map[string]string{}
	for seq := uint64(1); seq <= 2; seq++ {
		raw, err := dead.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		errs[string(raw.Data)] = raw.Header.Get("Natsjs-Error")
		assert.Equal(t, "1", raw.Header.Get("Natsjs-Deliveries"))
	}
	assert.Equal(t, map[string]string{"0": "job 0: malformed job", "1": "natsjs: permanent failure"}, errs)
	assert.True(t, errors.Is(natsjs.Permanent(bad), bad))
}

func TestADeadLetterCarriesThePanicValueAndAnIdThatDeduplicatesItsRepublication(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 1)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	publishJobs(t, js, 1)

	quiet := workerpool.WithPanicHandler(func(*workerpool.PanicError) {})
	stop := consuming(t, newPool(t, 1, quiet), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		panic(fmt.Errorf("index %d out of range", 7))
	}, natsjs.WithDeadLetter(js, "dead.jobs"))
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 }, "not dead-lettered")
	require.NoError(t, stop())
	dead, err := js.Stream(context.Background(), "DEAD")
	require.NoError(t, err)
	raw, err := dead.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	assert.Equal(t, "natsjs: handler panicked: index 7 out of range", raw.Header.Get("Natsjs-Error"))

	// Published again, as after an answer lost, the dead letter is
	// stored once.
	again := nats.NewMsg(raw.Subject)
	again.Data = raw.Data
	again.Header = raw.Header
	ack, err := js.PublishMsg(context.Background(), again)
	require.NoError(t, err)
	assert.True(t, ack.Duplicate, "the dead letter published again was stored again")
	assert.Equal(t, uint64(1), streamMsgs(t, js, "DEAD"))
}

func TestTheErrorHandlerIsToldOfADeadLetterThatCannotBePublished(t *testing.T) {
	t.Parallel() // waits on the clock, not the CPU
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 1)
	publishJobs(t, js, 1)

	got := make(chan error, 10)
	// No stream captures nowhere.dead: the copy cannot be stored.
	stop := consuming(t, newPool(t, 1), js, cons, func(context.Context, jetstream.Msg) error {
		return errors.New("boom")
	}, natsjs.WithDeadLetter(js, "nowhere.dead"), natsjs.WithErrorHandler(func(err error) { got <- err }),
		natsjs.WithDeadLetterTimeout(300*time.Millisecond))

	var err error
	select {
	case err = <-got:
	case <-time.After(waitFor):
		t.Fatal("the error handler was not told")
	}
	require.NoError(t, stop())
	var me *natsjs.MessageError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "dead-letter", me.Op)
	assert.Equal(t, "JOBS", me.Stream)
	assert.Equal(t, uint64(1), me.Sequence)
	assert.Contains(t, err.Error(), "JOBS/1")
	assert.Equal(t, uint64(1), streamMsgs(t, js, "JOBS"), "the message was lost")
}

// With a dead-letter subject no stream captures, each final failure held
// its worker for the 5s the publication was retried: 20 of them on 4
// workers took 25s to be reported. The worker now goes on at once.
func TestAFinalFailureWhoseDeadLetterWaitsHoldsNoWorker(t *testing.T) {
	t.Parallel()
	const jobs = 20
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 1) // every failure is final
	publishJobs(t, js, jobs)

	var mu sync.Mutex
	var started int
	var firstUnpublished time.Time
	startedBefore := -1 // handlers started when the first dead letter failed
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		mu.Lock()
		started++
		mu.Unlock()
		return errors.New("boom")
	}, natsjs.WithDeadLetter(js, "nowhere.dead"), natsjs.WithErrorHandler(func(err error) {
		var me *natsjs.MessageError
		if errors.As(err, &me) && me.Op == "dead-letter" {
			mu.Lock()
			if firstUnpublished.IsZero() {
				firstUnpublished, startedBefore = time.Now(), started
			}
			mu.Unlock()
		}
	}))
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return started == jobs && !firstUnpublished.IsZero()
	}, "not every handler ran, or no dead letter failed")
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, jobs, startedBefore, "handlers waited for the dead letters of others")
	assert.Equal(t, uint64(jobs), streamMsgs(t, js, "JOBS"), "a job whose dead letter failed was lost")
}

func TestADeadLetterIsTriedForTheDeadLetterTimeoutThenReported(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 1)
	publishJobs(t, js, 1)

	var failed atomic.Int64 // when the handler returned, in Unix nanoseconds
	told := make(chan time.Duration, 10)
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		failed.CompareAndSwap(0, time.Now().UnixNano())
		return errors.New("boom")
	}, natsjs.WithDeadLetter(js, "nowhere.dead"), natsjs.WithDeadLetterTimeout(timeout),
		natsjs.WithErrorHandler(func(err error) {
			var me *natsjs.MessageError
			if errors.As(err, &me) && me.Op == "dead-letter" {
				told <- time.Since(time.Unix(0, failed.Load()))
			}
		}))
	after := recv(t, told, "the dead letter's failure")
	require.NoError(t, stop())
	assert.GreaterOrEqual(t, after, timeout, "the dead letter was given up on before its timeout")
	// Generous for a loaded machine; the default is 2s, v3's 5s.
	assert.Less(t, after, timeout+time.Second, "the dead letter was tried long after its timeout")
}

// A copy kept because its dead letter could not be published never runs
// its handler: a Run with a dead-letter subject dead-letters it, one
// without terminates it, as any final failure.
func TestACopyOfAFinalFailureIsFinishedWithoutItsHandler(t *testing.T) {
	t.Parallel()
	for _, withDeadLetter := range []bool{true, false} {
		t.Run(fmt.Sprint("dead letter ", withDeadLetter), func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			_, js := connect(t, s)
			cons := workQueue(t, js, 30*time.Second, 3)
			_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
			require.NoError(t, err)
			// As keepFinal publishes it, with an ordinary job beside it.
			kept := nats.NewMsg("jobs.kept")
			kept.Data = []byte("kept")
			kept.Header.Set("Natsjs-Final-Error", "malformed job")
			kept.Header.Set("Natsjs-Attempts", "2")
			_, err = js.PublishMsg(context.Background(), kept)
			require.NoError(t, err)
			publishJobs(t, js, 1)

			ta := newTally()
			opts := []natsjs.Option{}
			if withDeadLetter {
				opts = append(opts, natsjs.WithDeadLetter(js, "dead.jobs"))
			}
			stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				ta.add(msg)
				return nil
			}, opts...)
			eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "the copy was not finished")
			require.NoError(t, stop())
			assert.Equal(t, map[string]int{"0": 1}, ta.snapshot(), "the copy's handler ran")
			if !withDeadLetter {
				assert.Zero(t, streamMsgs(t, js, "DEAD"))
				return
			}
			require.Equal(t, uint64(1), streamMsgs(t, js, "DEAD"))
			dead, err := js.Stream(context.Background(), "DEAD")
			require.NoError(t, err)
			raw, err := dead.GetMsg(context.Background(), 1)
			require.NoError(t, err)
			assert.Equal(t, "malformed job", raw.Header.Get("Natsjs-Error"))
			assert.Equal(t, "2", raw.Header.Get("Natsjs-Deliveries"))
			assert.Empty(t, raw.Header.Get("Natsjs-Final-Error"))
		})
	}
}

// Outside a work queue, a copy would reach every consumer of the stream:
// a final failure whose dead letter cannot be published is left, and the
// server delivers it again after AckWait, as the delivery table says: its
// handler runs again, but never beside itself.
func TestOutsideAWorkQueueAFinalFailureWhoseDeadLetterFailsComesBackAfterAckWait(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LOGS", Subjects: []string{"logs.>"}})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "LOGS", jetstream.ConsumerConfig{
		Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 2,
	})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "logs.1", []byte("x"))
	require.NoError(t, err)

	var ran, running, peak atomic.Int32
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ran.Add(1)
		if n := running.Add(1); n > peak.Load() {
			peak.Store(n)
		}
		defer running.Add(-1)
		return natsjs.Permanent(errors.New("malformed"))
	}, natsjs.WithDeadLetter(js, "nowhere.dead"), natsjs.WithDeadLetterTimeout(200*time.Millisecond))
	// Delivery 2, the last, is left too: the server delivers it no more.
	eventually(t, func() bool { return ran.Load() == 2 && consumerInfo(t, cons).NumAckPending == 1 }, "not delivered again after AckWait")
	require.NoError(t, stop())
	assert.Equal(t, int32(1), peak.Load())
	assert.Equal(t, uint64(1), streamMsgs(t, js, "LOGS"), "the message was lost")
}

// A handler that settled its message itself, then failed for good, has
// settled it: no dead letter.
func TestAHandlerThatSettledItsMessageThenFailedForGoodIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 3)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	publishJobs(t, js, 2)
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		require.NoError(t, msg.Ack())
		return natsjs.Permanent(errors.New("after the ack"))
	}, natsjs.WithDeadLetter(js, "dead.jobs"))
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
	require.NoError(t, stop())
	assert.Zero(t, streamMsgs(t, js, "DEAD"))
}

// Issue 37's third failure: a message whose dead letter waited stayed
// counted as running, and free workers were counted as the pool's size
// less the running messages: four Permanent failures on a pool of 4, their
// dead letters waiting 2s for a subject no stream captures, stopped every
// pull, and no healthy job ran meanwhile on four free workers. A waiting
// dead letter stays within Run's bounds, but frees its worker's share.
func TestDeadLettersThatWaitLeaveTheirWorkersToOtherJobs(t *testing.T) {
	t.Parallel()
	const before, bad, later = 20, 4, 400
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 5)
	// Healthy jobs first, so that Run knows them as jobs of 50ms, longer
	// than its horizon: it pulls for free workers, not ahead of them.
	publishJobs(t, js, before)
	for i := range bad {
		_, err := js.Publish(context.Background(), fmt.Sprintf("jobs.bad%d", i), []byte("bad"))
		require.NoError(t, err)
	}
	for i := range later {
		_, err := js.Publish(context.Background(), fmt.Sprintf("jobs.later%d", i), []byte("later"))
		require.NoError(t, err)
	}

	var failed, finished atomic.Int32
	var atLastFailure, atFirstReport atomic.Int32
	atFirstReport.Store(-1)
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if string(msg.Data()) == "bad" {
			if failed.Add(1) == bad {
				atLastFailure.Store(finished.Load())
			}
			return natsjs.Permanent(errors.New("malformed"))
		}
		time.Sleep(50 * time.Millisecond)
		finished.Add(1)
		return nil
	}, natsjs.WithDeadLetter(js, "nowhere.dead"), natsjs.WithErrorHandler(func(err error) {
		var me *natsjs.MessageError
		if errors.As(err, &me) && me.Op == "dead-letter" {
			atFirstReport.CompareAndSwap(-1, finished.Load())
		}
	}))
	eventually(t, func() bool { return atFirstReport.Load() >= 0 }, "no dead letter was given up on")
	require.NoError(t, stop())
	// 2s on four workers is about 160 jobs of 50ms; 20 leaves room for a
	// slow machine, and none is what a stalled Run finishes.
	ran := atFirstReport.Load() - atLastFailure.Load()
	assert.GreaterOrEqual(t, ran, int32(20), "healthy jobs finished while the dead letters waited")
	t.Logf("%d healthy jobs finished while the dead letters waited", ran)
}

// Issue 37's fourth failure: a dead letter whose answer came after the
// dead-letter timeout was stored, but counted failed; the message was kept
// as a copy with a sequence of its own, whose dead letter got an id of its
// own, which the dead-letter stream's duplicate window did not catch: two
// dead letters of one job. The id derives from the first original, for
// every copy.
func TestADeadLetterWhoseAnswerCameLateIsStoredOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 5)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	publishJobs(t, js, 1)

	// The dead letters go through a proxy: 1.2s each way, beyond the
	// dead-letter timeout of 1s.
	proxy := startLatencyProxy(t, s.Addr().String(), 0)
	slow, err := nats.Connect(proxy.url())
	require.NoError(t, err)
	t.Cleanup(slow.Close)
	proxy.setDelay(1200 * time.Millisecond)
	slowJS, err := jetstream.New(slow)
	require.NoError(t, err)

	var unpublished atomic.Int32
	var handled atomic.Int32
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		handled.Add(1)
		return natsjs.Permanent(errors.New("malformed"))
	}, natsjs.WithDeadLetter(slowJS, "dead.jobs"), natsjs.WithDeadLetterTimeout(time.Second),
		natsjs.WithBackoff(func(uint64) time.Duration { return 200 * time.Millisecond }),
		natsjs.WithErrorHandler(func(err error) {
			var me *natsjs.MessageError
			if errors.As(err, &me) && me.Op == "dead-letter" {
				unpublished.Add(1)
			}
		}))
	// The original's dead letter, and its copy's, each published and
	// answered too late; then the latency goes, and the next one is
	// answered in time.
	eventually(t, func() bool { return unpublished.Load() >= 2 }, "the dead letters were not late")
	proxy.setDelay(0)
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "the job was not finished")
	require.NoError(t, stop())
	assert.Equal(t, int32(1), handled.Load(), "the handler ran again")
	assert.Equal(t, uint64(1), streamMsgs(t, js, "DEAD"), "one job, several dead letters")
}

// Messages whose dead letters wait are no longer running, but still
// held: with WithMaxInFlight(2), two of them waiting leave no room for a
// third, and the server never counts more than 2 held.
func TestDeadLettersThatWaitStayWithinMaxInFlight(t *testing.T) {
	t.Parallel()
	const jobs = 6
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 5)
	publishJobs(t, js, jobs)
	peak, stopWatch := heldPeak(t, cons)
	var failed atomic.Int32
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		failed.Add(1)
		return natsjs.Permanent(fmt.Errorf("job %s", msg.Data()))
	}, natsjs.WithDeadLetter(js, "nowhere.dead"), natsjs.WithDeadLetterTimeout(300*time.Millisecond), natsjs.WithMaxInFlight(2))
	eventually(t, func() bool { return failed.Load() == jobs && peak() >= 2 }, "not every job failed")
	require.NoError(t, stop())
	assert.LessOrEqual(t, stopWatch(), 2, "held more than WithMaxInFlight with dead letters waiting")
}

// The copy kept for a final failure whose dead letter cannot be published
// is published as a stop's copy is: in a work queue bounded by MaxMsgs
// that drops its oldest message (DiscardOld), a copy stored while the
// stream is full would push out "older", a job waiting for its retry. The
// copy is not published: the failed message is left, reported, and comes
// back after AckWait, as outside a work queue.
func TestAFinalFailuresKeptCopyNeverPushesOutAnOlderJobOfAFullStream(t *testing.T) {
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
	_, err = js.Publish(context.Background(), "jobs.a", []byte("older"))
	require.NoError(t, err)
	var hook hookLog
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if string(msg.Data()) == "older" {
			return errors.New("later")
		}
		return natsjs.Permanent(errors.New("bad"))
	}, natsjs.WithBackoff(func(uint64) time.Duration { return time.Hour }),
		natsjs.WithDeadLetter(js, "dead.nowhere"), natsjs.WithDeadLetterTimeout(300*time.Millisecond), hook.option())
	eventually(t, func() bool { return len(hook.handlerErrors()) == 1 }, "the older job did not fail")
	_, err = js.Publish(context.Background(), "jobs.b", []byte("bad"))
	require.NoError(t, err)
	// Settled: by a copy, or left once the copy was refused (reported).
	republished := func() bool {
		for _, err := range hook.all() {
			var me *natsjs.MessageError
			if errors.As(err, &me) && me.Op == "republish" {
				return true
			}
		}
		return false
	}
	eventually(t, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.LastSeq >= 3 || republished()
	}, "the final failure was not settled")
	require.NoError(t, stop())

	raw, err := st.GetMsg(context.Background(), 1)
	require.NoError(t, err, "the final failure's copy pushed the older job, which never ran, out of the stream (reports %v)", hook.all())
	assert.Equal(t, "older", string(raw.Data))
}

// The copy kept for a final failure whose dead letter cannot be
// published is a copy like the stop's: with MaxMsgsPerSubject 1, once v2
// is stored, v1's copy must not push v2 out.
func TestAFinalFailuresKeptCopyNeverReplacesANewerJobOfItsSubject(t *testing.T) {
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
	ta := newTally()
	var hook hookLog
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		if string(msg.Data()) == "v1" {
			_, err := js.Publish(context.Background(), "jobs.a", []byte("v2"))
			require.NoError(t, err)
			return natsjs.Permanent(errors.New("bad"))
		}
		return nil
	}, natsjs.WithDeadLetter(js, "dead.nowhere"), natsjs.WithDeadLetterTimeout(300*time.Millisecond), hook.option())
	ok := assert.Eventually(t, func() bool { return ta.snapshot()["v2"] == 1 }, 10*time.Second, 10*time.Millisecond,
		"v2 never ran: v1's final-error copy replaced it (reports %v)", hook.all())
	require.NoError(t, stop())
	if ok {
		assert.Equal(t, map[string]int{"v1": 1, "v2": 1}, ta.snapshot())
	}
}
