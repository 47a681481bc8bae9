package natsjs_test

import (
	"context"
	"errors"
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

// soon bounds how long a handed-back message may take to reach another
// process: half the 30s AckWait these tests use, so that only a hand-back
// can be that quick, and far above any scheduling delay.
const soon = 15 * time.Second

// The grace period cannot be tested in a testing/synctest bubble: Run's
// goroutines wait on the client's, which wait on the embedded server's
// sockets, which no bubble holds, so the bubble's clock would never move.
// So the tests below check what the clock can only make later, never
// sooner: that a handler's ctx is cancelled no earlier than the grace
// period after the stop, and, generously, not much later; they wait for
// events, never for time to pass.

func TestAStopHandsQueuedMessagesBackAtOnceWhileRunningHandlersFinish(t *testing.T) {
	t.Parallel()
	const jobs = 5
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	// Process A runs one job, which ignores its ctx, and keeps the others
	// waiting for its one worker.
	release := make(chan struct{})
	startedA := make(chan string, jobs)
	ta := newTally()
	stopA := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		startedA <- string(msg.Data())
		<-release
		ta.add(msg)
		return nil
	}, natsjs.WithAhead(jobs-1))
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // a failure below must not leave the handler, and the pool's Stop, waiting
	first := recv(t, startedA, "A's handler")
	eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == jobs }, "A did not take every job")

	stoppedA := make(chan error, 1)
	go func() { stoppedA <- stopA() }()
	handedBack := time.Now()

	// Process B gets the four never-started jobs without waiting for
	// AckWait, while A's handler still runs.
	tb := newTally()
	stopB := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		tb.add(msg)
		return nil
	})
	eventually(t, func() bool { return tb.distinct() == jobs-1 }, "B did not get the handed-back jobs")
	assert.Less(t, time.Since(handedBack), soon)
	assert.NotContains(t, tb.snapshot(), first, "B got the job A was running")
	select {
	case err := <-stoppedA:
		t.Fatalf("A's Run returned (%v) before its running handler finished", err)
	default:
	}

	free()
	require.NoError(t, recv(t, stoppedA, "A's Run"))
	assert.Equal(t, map[string]int{first: 1}, ta.snapshot())
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "A's last job not acked")
	require.NoError(t, stopB())
	assert.Len(t, startedA, 0, "A started a job after its stop")
}

func TestRunningHandlersKeepTheirCtxForTheGracePeriodThenLoseIt(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 2)

	var stopped atomic.Int64 // when the stop began, in Unix nanoseconds
	cancelled := make(chan time.Duration, 2)
	started := make(chan struct{}, 2)
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		started <- struct{}{}
		<-ctx.Done()
		cancelled <- time.Since(time.Unix(0, stopped.Load()))
		return nil // finished despite the stop: acked
	}, natsjs.WithGracePeriod(grace))
	recv(t, started, "a handler")
	recv(t, started, "a handler")
	stopped.Store(time.Now().UnixNano())
	require.NoError(t, stop())
	for range 2 {
		d := recv(t, cancelled, "a handler's ctx")
		assert.GreaterOrEqual(t, d, grace, "a handler lost its ctx before the grace period ended")
		assert.Less(t, d, grace+soon, "a handler kept its ctx long after the grace period")
	}
	assert.Zero(t, streamMsgs(t, js, "JOBS"), "the handlers that finished were not acked")
}

func TestAHandlerFinishedWithinTheGracePeriodIsAckedAndRunReturnsAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 1)

	started := make(chan struct{})
	finish := make(chan struct{})
	var lostCtx atomic.Bool
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		close(started)
		<-finish
		lostCtx.Store(ctx.Err() != nil)
		return nil
	}, natsjs.WithGracePeriod(time.Hour))
	recv(t, started, "the handler")
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	close(finish)
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(soon):
		t.Fatal("Run waited for the grace period after its handlers had finished")
	}
	assert.False(t, lostCtx.Load(), "the handler lost its ctx within the grace period")
	assert.Zero(t, streamMsgs(t, js, "JOBS"), "the job was not acked")
}

func TestAHandlerThatIgnoresItsCtxPastTheGracePeriodIsWaitedForAndAcked(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 1)

	started := make(chan struct{})
	release := make(chan struct{})
	lostCtx := make(chan struct{})
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		close(started)
		<-ctx.Done()
		close(lostCtx)
		<-release // ignores it
		return nil
	}, natsjs.WithGracePeriod(50*time.Millisecond))
	recv(t, started, "the handler")
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	<-lostCtx
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while its handler ran", err)
	default:
	}
	close(release)
	require.NoError(t, recv(t, stopped, "Run"))
	assert.Zero(t, streamMsgs(t, js, "JOBS"), "the job its handler finished was not acked")
}

func TestAHandlerThatFailsBecauseOfTheStopHandsItsMessageBackAtOnceAndItIsNoFinalFailure(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 3)
	publishJobs(t, js, 1)

	started := make(chan struct{})
	told := make(chan error, 10)
	stopA := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithGracePeriod(0), natsjs.WithBackoff(func(uint64) time.Duration { return time.Hour }),
		natsjs.WithErrorHandler(func(err error) { told <- err }))
	recv(t, started, "the handler")
	require.NoError(t, stopA())
	var he *natsjs.HandlerError
	require.ErrorAs(t, <-told, &he)
	assert.True(t, he.Stopped, "%v", he)
	assert.False(t, he.Final, "%v", he)
	assert.Equal(t, uint64(1), he.Delivery)
	assert.ErrorIs(t, he, context.Canceled)

	// In a work queue whose consumer has a MaxDeliver, it comes back as a
	// copy that has used no attempt (see republish_test.go).
	got := make(chan jetstream.Msg, 1)
	stopB := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		got <- msg
		return nil
	})
	select {
	case msg := <-got:
		md, err := msg.Metadata()
		require.NoError(t, err)
		assert.Equal(t, uint64(1), md.NumDelivered)
		assert.Equal(t, "0", msg.Headers().Get("Natsjs-Attempts"))
		assert.Equal(t, "1", msg.Headers().Get("Natsjs-Republished-From"))
	case <-time.After(soon):
		t.Fatal("the message interrupted by the stop did not come back at once")
	}
	require.NoError(t, stopB())
}

func TestAPoolStoppedUnderRunEndsItWithErrStoppedAndHandsBackItsMessages(t *testing.T) {
	t.Parallel()
	const jobs = 4
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	p := workerpool.New(1)
	release := make(chan struct{})
	started := make(chan string, jobs)
	var ctxDone atomic.Bool // the running handler's ctx, once released
	ta := newTally()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		consumed <- natsjs.Run(ctx, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			started <- string(msg.Data())
			<-release
			ctxDone.Store(ctx.Err() != nil)
			ta.add(msg)
			return nil
		}, natsjs.WithAhead(jobs-1))
	}()
	first := recv(t, started, "the handler")
	eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == jobs }, "did not take every job")

	dropped := make(chan []func(), 1)
	go func() { dropped <- p.Stop() }() // waits for the running handler

	tb := newTally()
	stopB := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		tb.add(msg)
		return nil
	})
	eventually(t, func() bool { return tb.distinct() == jobs-1 }, "the dropped jobs were not handed back")
	close(release)
	select {
	case err := <-consumed:
		assert.ErrorIs(t, err, workerpool.ErrStopped)
	case <-time.After(waitFor):
		t.Fatal("Run did not return after its pool stopped")
	}
	// Running the tasks Stop dropped, after the hand-back, does nothing.
	for _, task := range <-dropped {
		task()
	}
	assert.Equal(t, map[string]int{first: 1}, ta.snapshot())
	// The hand-back B saw comes after the stop: the handler's ctx was done.
	assert.True(t, ctxDone.Load(), "the handler's ctx was not done after its pool stopped")
	assert.Len(t, started, 0)
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stopB())
}

func TestRunOnAStoppedPoolReturnsErrStoppedAndTakesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 3)
	p := workerpool.New(2)
	p.StopWait()

	err := natsjs.Run(context.Background(), p, js, cons, func(context.Context, jetstream.Msg) error {
		t.Error("a handler ran on a stopped pool")
		return nil
	})
	assert.ErrorIs(t, err, workerpool.ErrStopped)
	requireTookNothing(t, cons, 3)
}

func TestRunWithADoneContextReturnsNilAndTakesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	err := natsjs.Run(ctx, newPool(t, 2), js, cons, func(context.Context, jetstream.Msg) error {
		t.Error("a handler ran after ctx was done")
		return nil
	})
	assert.NoError(t, err)
	requireTookNothing(t, cons, 3)
}

// requireTookNothing checks that the server delivered none of the n
// messages published to cons, which are all still pending. The server
// counts a consumer's pending messages some time after it stored them.
func requireTookNothing(t *testing.T, cons jetstream.Consumer, n int) {
	t.Helper()
	info := consumerInfo(t, cons)
	assert.Zero(t, info.Delivered.Consumer, "a message was delivered")
	assert.Zero(t, info.NumAckPending)
	eventually(t, func() bool { return consumerInfo(t, cons).NumPending == uint64(n) }, "messages not pending")
}

func TestNoHandlerStartsOnceRunsContextIsDone(t *testing.T) {
	t.Parallel()
	const jobs = 10
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, jobs)

	// One worker, every job held: the first handler cancels Run's ctx
	// and returns, freeing the worker while nine messages wait for it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started atomic.Int32
	err := natsjs.Run(ctx, newPool(t, 1), js, cons, func(hctx context.Context, msg jetstream.Msg) error {
		if started.Add(1) > 1 {
			t.Errorf("handler of job %s started after ctx was done (ctx: %v)", msg.Data(), ctx.Err())
			return nil
		}
		// Not eventually: a FailNow here would end the handler, not the
		// test, which would then wait for Run for ever.
		assert.Eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending == jobs }, waitFor, 5*time.Millisecond, "did not take every job")
		cancel()
		assert.NoError(t, hctx.Err(), "the handler's ctx is done within the grace period")
		return nil
	}, natsjs.WithAhead(jobs-1), natsjs.WithGracePeriod(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, int32(1), started.Load())
	assert.Equal(t, uint64(jobs-1), streamMsgs(t, js, "JOBS"), "the handled job was not acked")

	// The nine never started were handed back: another process gets them.
	handedBack := time.Now()
	tb := newTally()
	stopB := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		tb.add(msg)
		return nil
	})
	eventually(t, func() bool { return tb.distinct() == jobs-1 }, "the waiting jobs were not handed back")
	assert.Less(t, time.Since(handedBack), soon)
	require.NoError(t, stopB())
}

// An outage is a run of outageRun: one worker on 100ms jobs, holding 8 of
// them, when the server shuts down and Run's ctx is cancelled.
type outage struct {
	port     int
	dir      string
	js       jetstream.JetStream
	ran      <-chan error // Run's result: Run may still be stopping
	hook     *hookLog
	finished *tally // the jobs whose handler returned nil
}

// outageRun starts Run, then shuts the server down and cancels Run's ctx.
// Run waits up to settle for the server to confirm what its stop settled.
func outageRun(t *testing.T, settle time.Duration) outage {
	t.Helper()
	const jobs, held = 20, 8
	o := outage{dir: t.TempDir(), hook: &hookLog{}, finished: newTally()}
	o.port = restartablePort(t)
	s := startServerAt(t, o.port, o.dir)
	_, o.js = connect(t, s)
	cons := workQueue(t, o.js, time.Minute, 0)
	publishJobs(t, o.js, jobs)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ran := make(chan error, 1)
	o.ran = ran
	started := make(chan struct{}, jobs)
	go func() {
		ran <- natsjs.Run(ctx, newPool(t, 1), o.js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			started <- struct{}{}
			time.Sleep(100 * time.Millisecond)
			o.finished.add(msg)
			return nil
		}, natsjs.WithMaxInFlight(held), natsjs.WithAhead(held-1), natsjs.WithGracePeriod(0),
			natsjs.WithSettleTimeout(settle), o.hook.option())
	}()
	recv(t, started, "the handler")
	// It pulls again once half of what it should have queued is missing:
	// it holds between half and all of its bound.
	eventually(t, func() bool { return consumerInfo(t, cons).NumAckPending >= held/2 }, "Run holds few messages")
	s.Shutdown()
	s.WaitForShutdown()
	cancel()
	return o
}

// Issue 24's third failure: a stop during a server outage lost its
// hand-backs, and Run returned nil: the messages came back only after
// AckWait. A stop whose hand-backs cannot reach the server says so.
func TestAStopDuringAnOutageThatOutlastsItSaysSo(t *testing.T) {
	t.Parallel()
	o := outageRun(t, time.Second)
	err := recv(t, o.ran, "Run")
	require.ErrorIs(t, err, natsjs.ErrNotConfirmed, "Run said nothing of the hand-backs it could not send")
	var seqs []uint64
	for _, e := range o.hook.all() {
		var me *natsjs.MessageError
		if errors.As(e, &me) && errors.Is(e, natsjs.ErrNotConfirmed) {
			seqs = append(seqs, me.Sequence)
		}
	}
	assert.NotEmpty(t, seqs, "the error handler was told of no message")
}

// Issue 24's third failure, the other way round: an outage that ends
// while Run is still stopping loses none of the stop's hand-backs; they
// reach the server when the client reconnects, and another process gets
// the messages at once, not after AckWait. (The acks of jobs finished as
// the connection died may be lost with it: those jobs come back after
// AckWait, as at-least-once allows; this test does not wait for them.)
func TestAStopDuringAnOutageThatEndsInTimeHandsEverythingBack(t *testing.T) {
	t.Parallel()
	const jobs = 20
	o := outageRun(t, 10*time.Second)
	startServerAt(t, o.port, o.dir)
	require.NoError(t, recv(t, o.ran, "Run"))
	restarted := time.Now()
	cons, err := o.js.Consumer(context.Background(), "JOBS", "workers")
	require.NoError(t, err)
	tb := newTally()
	stopB := consuming(t, newPool(t, 8), o.js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		tb.add(msg)
		return nil
	})
	// AckWait is a minute: only hand-backs bring the jobs A did not
	// finish back within waitFor.
	unfinished := func() []string {
		var left []string
		doneA, doneB := o.finished.snapshot(), tb.snapshot()
		for i := range jobs {
			if job := strconv.Itoa(i); doneA[job] == 0 && doneB[job] == 0 {
				left = append(left, job)
			}
		}
		return left
	}
	if !assert.Eventually(t, func() bool { return len(unfinished()) == 0 }, waitFor, 5*time.Millisecond) {
		info, _ := cons.Info(context.Background())
		t.Fatalf("jobs %v not back %v after the restart: %+v", unfinished(), time.Since(restarted), info)
	}
	require.NoError(t, stopB())
}

func TestAHandlerThatPanicsOrCallsGoexitDuringTheGracePeriodFailsAndRunStops(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"panic", "goexit"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			_, js := connect(t, s)
			cons := workQueue(t, js, 30*time.Second, 0)
			publishJobs(t, js, 1)

			var panics atomic.Int32
			p := newPool(t, 1, workerpool.WithPanicHandler(func(*workerpool.PanicError) { panics.Add(1) }))
			started := make(chan struct{})
			fail := make(chan struct{})
			var hook hookLog
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stopped := make(chan error, 1)
			go func() {
				stopped <- natsjs.Run(ctx, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
					md, err := msg.Metadata()
					require.NoError(t, err)
					if md.NumDelivered > 1 {
						return nil
					}
					close(started)
					<-fail
					if kind == "panic" {
						panic("in the grace period")
					}
					runtime.Goexit()
					return nil
				}, natsjs.WithBackoff(func(uint64) time.Duration { return 0 }), hook.option())
			}()
			recv(t, started, "the handler")
			// The stop begins before the handler fails, which it does
			// in the grace period: else its message, Nak'd at once, could
			// come back to this Run, which would handle it.
			cancel()
			close(fail)
			require.NoError(t, recv(t, stopped, "Run"))
			hes := hook.handlerErrors()
			require.Len(t, hes, 1)
			assert.False(t, hes[0].Stopped, "a failure within the grace period is the handler's own")
			if kind == "panic" {
				eventually(t, func() bool { return panics.Load() == 1 }, "the panic did not reach the pool")
			}
			// Handed back with its backoff (0): another Run handles it.
			ta := newTally()
			stopB := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				ta.add(msg)
				return nil
			})
			eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "the failed message was not handed back")
			require.NoError(t, stopB())
			requireEachOnce(t, ta, 1)
		})
	}
}

// Issue 37's second failure: a handler the stop cut was handed back at
// once, while the run's own pull was still open (a free worker keeps one
// open): the server redelivered the message into it, and the stop handed
// it back again. One stop cost two deliveries, which with MaxDeliver 2
// outside a work queue left the job in its stream for good; in a work
// queue it published a second copy. A cut handler's message is handed
// back once the pulls have ended, as a queued one is.
func TestAHandlerTheStopCutIsHandedBackOnceThePullsHaveEnded(t *testing.T) {
	t.Parallel()
	for _, workQueue := range []bool{false, true} {
		name := "limits stream"
		if workQueue {
			name = "work queue"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const stops = 4
			s := startServer(t)
			_, js := connect(t, s)
			cfg := jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}}
			if workQueue {
				cfg.Retention = jetstream.WorkQueuePolicy
			}
			st, err := js.CreateStream(context.Background(), cfg)
			require.NoError(t, err)
			cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
				Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 2,
			})
			require.NoError(t, err)

			for round := range stops {
				job := strconv.Itoa(round)
				ack, err := js.Publish(context.Background(), "jobs."+job, []byte(job))
				require.NoError(t, err)
				// Two workers, one job: the free worker keeps a pull open
				// while the handler runs.
				started := make(chan struct{}, 2)
				stopA := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
					started <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				}, natsjs.WithGracePeriod(0))
				recv(t, started, "the handler")
				require.NoError(t, stopA(), "round %d: the stop could not hand the job back", round)
				assert.Empty(t, started, "round %d: the job came back to the stopping Run", round)

				if workQueue {
					info, err := st.Info(context.Background())
					require.NoError(t, err)
					assert.Equal(t, ack.Sequence+1, info.State.LastSeq, "round %d: the stop published more than one copy", round)
				}
				// Another Run gets it, on an attempt of its own.
				got := make(chan jetstream.Msg, 2)
				stopB := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
					got <- msg
					return nil
				})
				select {
				case msg := <-got:
					assert.Equal(t, job, string(msg.Data()))
				case <-time.After(soon):
					info := consumerInfo(t, cons)
					t.Fatalf("round %d: the job did not come back: %d delivered, %d ack pending, %d redelivered",
						round, info.Delivered.Consumer, info.NumAckPending, info.NumRedelivered)
				}
				require.NoError(t, stopB())
			}
		})
	}
}

// With key order, a message is a task of the pool and the flow pulls for
// the pool's workers, so a pull is open while a handler runs: a handler
// the stop cut is handed back once, after the pulls, as without keys.
func TestAKeyedHandlerTheStopCutIsHandedBackOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 3)
	st, err := js.Stream(context.Background(), "JOBS")
	require.NoError(t, err)
	for round := range 3 {
		ack, err := js.Publish(context.Background(), "jobs.k"+strconv.Itoa(round), []byte(strconv.Itoa(round)))
		require.NoError(t, err)
		started := make(chan struct{}, 2)
		stopA := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, natsjs.WithGracePeriod(0), natsjs.WithKey(subjectKey))
		recv(t, started, "the handler")
		require.NoError(t, stopA())
		assert.Empty(t, started, "round %d: the job came back to the stopping Run", round)
		info, err := st.Info(context.Background())
		require.NoError(t, err)
		assert.Equal(t, ack.Sequence+1, info.State.LastSeq, "round %d: the stop published more than one copy", round)
		done := make(chan struct{}, 1)
		stopB := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			done <- struct{}{}
			return nil
		})
		recv(t, done, "the handed-back job")
		eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
		require.NoError(t, stopB())
	}
}
