package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A snoozeLog records, for one job, when each handler ran and what it
// returned.
type snoozeLog struct {
	mu   sync.Mutex
	runs []time.Time
}

func (l *snoozeLog) ran() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, time.Now())
	return len(l.runs)
}

func (l *snoozeLog) times() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.runs...)
}

// In a work queue, a snooze is a delayed copy: the job comes back after
// the delay and still has every attempt. With MaxDeliver 2, a job snoozed
// twice, then failing once, then succeeding, is never dead-lettered; the
// copy's last server delivery, which its wait made one short, is not
// Nak'd into a stranding but copied again.
func TestASnoozeInAWorkQueueComesBackAfterItsDelayAndUsesNoAttempt(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 2)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	publishJobs(t, js, 1)

	var log snoozeLog
	var hook hookLog
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		switch log.ran() {
		case 1, 2:
			return fmt.Errorf("not yet: %w", natsjs.Snooze(delay))
		case 3:
			return errors.New("a real failure")
		}
		return nil
	}, natsjs.WithDeadLetter(js, "dead.jobs"), natsjs.WithBackoff(func(uint64) time.Duration { return 0 }), hook.option())
	eventually(t, func() bool { return len(log.times()) == 4 && streamEmpty(js, "JOBS") }, "the job did not get its attempts")
	require.NoError(t, stop())
	runs := log.times()
	for i := range 2 {
		assert.GreaterOrEqual(t, runs[i+1].Sub(runs[i]), delay, "snooze %d came back early", i+1)
	}
	assert.Zero(t, streamMsgs(t, js, "DEAD"), "a snoozed job was dead-lettered")
	hes := hook.handlerErrors()
	require.Len(t, hes, 1, "a snooze was reported: %v", hook.all())
	assert.Equal(t, uint64(1), hes[0].Delivery, "the snoozes used attempts")
	assert.False(t, hes[0].Final)
}

// The message a snooze copies stays held, with its progress messages,
// until its term: the delayed copy may take longer than AckWait to be
// stored. v3.2 stopped them before the copy was published: a copy stored
// more than AckWait later left the message to come back, and its handler
// ran again.
func TestASnoozedMessageKeepsItsProgressWhileItsCopyIsPublished(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, time.Second, 5)
	publishJobs(t, js, 1)

	// Run's publications to jobs.> (its copies) reach the server two
	// AckWaits late; each try of a copy waits 5 s for its answer.
	proxy, slowJS := heldCopies(t, s, 2*time.Second)

	// A second worker keeps a pull open, into which the server could
	// deliver the message again.
	var originals, copies atomic.Int32
	stop := consuming(t, newPool(t, 2), slowJS, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if msg.Headers().Get("Natsjs-Origin") != "" {
			copies.Add(1)
			return nil
		}
		originals.Add(1)
		return natsjs.Snooze(100 * time.Millisecond)
	}, natsjs.WithSettleTimeout(20*time.Second))
	eventually(t, func() bool { return copies.Load() == 1 && streamEmpty(js, "JOBS") }, "the copy was not handled")
	require.NoError(t, stop())
	require.Positive(t, proxy.held.Load(), "no copy went through the proxy")
	assert.Equal(t, int32(1), originals.Load(), "the snoozed message came back while its copy was published")
	assert.Equal(t, int32(1), copies.Load())
}

// Outside a work queue a copy would reach every consumer: a snooze is a
// Nak with the delay, which the server counts as a delivery, an attempt;
// on the last delivery, where the server cannot delay the message, it is a
// final failure, dead-lettered.
func TestASnoozeOutsideAWorkQueueIsANakWithItsDelayAndFinalOnTheLastDelivery(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LOGS", Subjects: []string{"logs.>"}})
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "LOGS", jetstream.ConsumerConfig{
		Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 2,
	})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "logs.1", []byte("x"))
	require.NoError(t, err)

	var log snoozeLog
	var hook hookLog
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		log.ran()
		return natsjs.Snooze(delay)
	}, natsjs.WithDeadLetter(js, "dead.logs"), hook.option())
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 }, "the snooze on the last delivery was not final")
	require.NoError(t, stop())
	runs := log.times()
	require.Len(t, runs, 2)
	assert.GreaterOrEqual(t, runs[1].Sub(runs[0]), delay, "the snooze came back early")
	hes := hook.handlerErrors()
	require.Len(t, hes, 1)
	assert.True(t, hes[0].Final)
	assert.Equal(t, uint64(2), hes[0].Delivery, "outside a work queue, a snooze uses an attempt")
	dead, err := js.Stream(context.Background(), "DEAD")
	require.NoError(t, err)
	raw, err := dead.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	assert.Contains(t, raw.Header.Get("Natsjs-Error"), "snoozed")
}

// A stop does not cut a snooze short: a handler that snoozes once the
// stop cancelled its ctx has its message back after the delay, not at
// once, and another process's handler runs it then.
func TestASnoozeDuringTheStopIsKept(t *testing.T) {
	t.Parallel()
	const delay = 500 * time.Millisecond
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 3)
	publishJobs(t, js, 1)

	started := make(chan struct{}, 1)
	var snoozed atomic.Int64 // when the handler snoozed, in Unix nanoseconds
	stopA := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		started <- struct{}{}
		<-ctx.Done()
		snoozed.Store(time.Now().UnixNano())
		return natsjs.Snooze(delay)
	}, natsjs.WithGracePeriod(0))
	recv(t, started, "the handler")
	require.NoError(t, stopA())
	got := make(chan time.Duration, 1)
	stopB := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		got <- time.Since(time.Unix(0, snoozed.Load()))
		assert.Equal(t, "0", msg.Headers().Get("Natsjs-Attempts"))
		return nil
	})
	assert.GreaterOrEqual(t, recv(t, got, "the snoozed job"), delay, "the stop cut the snooze short")
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
	require.NoError(t, stopB())
}

// A snooze meets a per-subject limit: v1 snoozes after v2 was stored,
// which pushed v1 out of the stream; the snooze's copy would push v2 out.
// v1 is superseded; v2 runs.
func TestASnoozeOfAMessageANewerOnePushedOutIsSuperseded(t *testing.T) {
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
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var hook hookLog
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		if string(msg.Data()) == "v1" {
			started <- struct{}{}
			<-release
			return natsjs.Snooze(100 * time.Millisecond)
		}
		return nil
	}, hook.option())
	recv(t, started, "v1's handler")
	_, err = js.Publish(context.Background(), "jobs.a", []byte("v2"))
	require.NoError(t, err)
	close(release)
	eventually(t, func() bool { return ta.snapshot()["v2"] == 1 && streamEmpty(js, "JOBS") }, "v2 was not handled")
	require.NoError(t, stop())
	assert.Equal(t, map[string]int{"v1": 1, "v2": 1}, ta.snapshot(), "the stale v1 ran again")
	var superseded bool
	for _, e := range hook.all() {
		superseded = superseded || errors.Is(e, natsjs.ErrSuperseded)
	}
	assert.True(t, superseded, "the error handler was not told")
}

// A snooze meets a consumer BackOff, whose Nak delays nats-server counts
// oddly: the copy's wait still lasts the snooze, not the BackOff. With
// MaxDeliver 1 in a work queue, where a copy's only delivery would be its
// wait, a snooze is a final failure.
func TestASnoozeMeetsTheConsumersBackOffAndMaxDeliver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		maxDeliver int
		backOff    []time.Duration
	}{
		{"BackOff", 3, []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second}},
		{"MaxDeliver 1", 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const delay = 300 * time.Millisecond
			s := startServer(t)
			_, js := connect(t, s)
			_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy})
			require.NoError(t, err)
			_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
			require.NoError(t, err)
			cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
				Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: tc.maxDeliver, BackOff: tc.backOff,
			})
			require.NoError(t, err)
			publishJobs(t, js, 1)
			var log snoozeLog
			var hook hookLog
			stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				if log.ran() == 1 {
					return natsjs.Snooze(delay)
				}
				return nil
			}, natsjs.WithDeadLetter(js, "dead.jobs"), hook.option())
			if tc.maxDeliver == 1 {
				eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 && streamEmpty(js, "JOBS") }, "not final")
				require.NoError(t, stop())
				hes := hook.handlerErrors()
				require.Len(t, hes, 1)
				assert.True(t, hes[0].Final)
				assert.Len(t, log.times(), 1)
				return
			}
			eventually(t, func() bool { return len(log.times()) == 2 && streamEmpty(js, "JOBS") }, "the snoozed job did not come back")
			require.NoError(t, stop())
			runs := log.times()
			gap := runs[1].Sub(runs[0])
			assert.GreaterOrEqual(t, gap, delay)
			assert.Less(t, gap, tc.backOff[0], "the wait lasted the consumer's BackOff, not the snooze")
			assert.Empty(t, hook.all())
		})
	}
}

// A snooze's delayed copy is published as a stop's copy is: in a work
// queue bounded by MaxMsgs that drops its oldest message (DiscardOld), a
// copy stored while the stream is full would push out "older", a job
// waiting for its retry. The copy is not published: the snooze falls back
// to a Nak with its delay, which costs an attempt but loses nothing.
func TestASnoozesCopyNeverPushesOutAnOlderJobOfAFullStream(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy, MaxMsgs: 2, MaxMsgsPerSubject: 5,
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
		return natsjs.Snooze(time.Hour)
	}, natsjs.WithBackoff(func(uint64) time.Duration { return time.Hour }), hook.option())
	eventually(t, func() bool { return len(hook.handlerErrors()) == 1 }, "the older job did not fail")
	_, err = js.Publish(context.Background(), "jobs.b", []byte("snoozer"))
	require.NoError(t, err)
	// Settled: by a copy, once it is delivered for its wait, or by a Nak
	// once the copy was refused (and reported).
	eventually(t, func() bool {
		return consumerInfo(t, cons).Delivered.Consumer >= 3 || len(hook.all()) == 2
	}, "the snooze was not settled")
	require.NoError(t, stop())

	raw, err := st.GetMsg(context.Background(), 1)
	require.NoError(t, err, "the snooze's copy pushed the older job, which never ran, out of the stream (reports %v)", hook.all())
	assert.Equal(t, "older", string(raw.Data))
	raw, err = st.GetMsg(context.Background(), 2)
	require.NoError(t, err, "the snoozed job was lost")
	assert.Equal(t, "snoozer", string(raw.Data))
}

// A snooze and a stop cost no attempt: a job snoozed once, cut by
// a stop once, then failing every time, still gets MaxDeliver (3) attempts,
// numbered 1, 2, 3, the last final.
func TestASnoozeAndAStopCostNoAttempt(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 3)
	publishJobs(t, js, 1)
	var calls atomic.Int32
	started := make(chan struct{}, 4)
	stopA := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if calls.Add(1) == 1 {
			return natsjs.Snooze(20 * time.Millisecond)
		}
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithGracePeriod(0))
	recv(t, started, "the snoozed job")
	require.NoError(t, stopA())
	var hook hookLog
	var fails atomic.Int32
	stopB := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		fails.Add(1)
		return errors.New("boom")
	}, natsjs.WithBackoff(func(uint64) time.Duration { return 10 * time.Millisecond }), hook.option())
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "the job was not finished")
	require.NoError(t, stopB())
	var ds []string
	for _, he := range hook.handlerErrors() {
		ds = append(ds, fmt.Sprint(he.Delivery, "/", he.Final))
	}
	assert.Equal(t, int32(3), fails.Load(), "the snooze or the stop cost attempts: %v", ds)
	assert.Equal(t, []string{"1/false", "2/false", "3/true"}, ds)
}
