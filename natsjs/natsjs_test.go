package natsjs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunReturnsAnErrorForNilArguments(t *testing.T) {
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 1)
	p := newPool(t, 1)
	var nilPool *workerpool.Pool
	var nilSub *workerpool.Subpool
	var nilJS jetstream.JetStream
	h := func(context.Context, jetstream.Msg) error {
		t.Error("a handler ran")
		return nil
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"nil ctx", func() error { return natsjs.Run(nil, p, js, cons, h) }}, //nolint:staticcheck // the point of the test
		{"nil pool", func() error { return natsjs.Run(context.Background(), nil, js, cons, h) }},
		{"nil *Pool", func() error { return natsjs.Run(context.Background(), nilPool, js, cons, h) }},
		{"nil *Subpool", func() error { return natsjs.Run(context.Background(), nilSub, js, cons, h) }},
		{"nil js", func() error { return natsjs.Run(context.Background(), p, nilJS, cons, h) }},
		{"nil consumer", func() error { return natsjs.Run(context.Background(), p, js, nil, h) }},
		{"nil handler", func() error { return natsjs.Run(context.Background(), p, js, cons, nil) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "natsjs: "), err.Error())
		})
	}
	requireTookNothing(t, cons, 1)
}

func TestRunReturnsErrInvalidConsumerForAConsumerItCannotServe(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	workQueue(t, js, 2*time.Second, 0)
	p := newPool(t, 1)
	h := func(context.Context, jetstream.Msg) error {
		t.Error("a handler ran")
		return nil
	}
	// A work-queue stream refuses such consumers; a limits stream does not.
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LOGS", Subjects: []string{"logs.>"}})
	require.NoError(t, err)
	publishLogs := func() {
		_, err := js.Publish(context.Background(), "logs.1", []byte("x"))
		require.NoError(t, err)
	}
	publishLogs()
	cases := []struct {
		name string
		cfg  jetstream.ConsumerConfig
		want string
	}{
		{"AckNone", jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}, "AckExplicit"},
		{"AckAll", jetstream.ConsumerConfig{AckPolicy: jetstream.AckAllPolicy}, "AckExplicit"},
		{"MaxRequestExpires below a pull's shortest wait", jetstream.ConsumerConfig{
			AckPolicy: jetstream.AckExplicitPolicy, MaxRequestExpires: 5 * time.Millisecond,
		}, "MaxRequestExpires"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Durable = fmt.Sprint("c", i)
			cons, err := js.CreateOrUpdateConsumer(context.Background(), "LOGS", tc.cfg)
			require.NoError(t, err)
			err = natsjs.Run(context.Background(), p, js, cons, h)
			require.ErrorIs(t, err, natsjs.ErrInvalidConsumer)
			assert.Contains(t, err.Error(), tc.want)
			assert.Zero(t, consumerInfo(t, cons).Delivered.Consumer, "a message was delivered")
		})
	}
}

func TestInvalidOptionsAreErrorsFromRunBeforeItTakesAMessage(t *testing.T) {
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 2*time.Second, 0)
	publishJobs(t, js, 3)
	// A consumer whose BackOff redelivers after 900ms: the progress
	// interval must be below that, not just below AckWait.
	// (A work-queue stream allows one consumer: this one reads another.)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LOGS", Subjects: []string{"logs.>"}})
	require.NoError(t, err)
	backoffCons, err := js.CreateOrUpdateConsumer(context.Background(), "LOGS", jetstream.ConsumerConfig{
		Durable: "backoff", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second,
		MaxDeliver: 4, BackOff: []time.Duration{2 * time.Second, 900 * time.Millisecond},
	})
	require.NoError(t, err)
	// JetStream contexts that do not reach cons: one whose API prefix no
	// server answers, and one of another server, with a stream and a
	// consumer of the same names. Run's js must reach cons.
	nc, _ := connect(t, s)
	nowhere, err := jetstream.NewWithAPIPrefix(nc, "$JS.nowhere.API")
	require.NoError(t, err)
	_, otherJS := connect(t, startServer(t))
	workQueue(t, otherJS, 2*time.Second, 0)
	h := func(context.Context, jetstream.Msg) error {
		t.Error("a handler ran")
		return nil
	}
	cases := map[string]struct {
		js   jetstream.JetStream
		cons jetstream.Consumer
		opts []natsjs.Option
	}{
		"WithMaxInFlight(0)":                   {js, cons, []natsjs.Option{natsjs.WithMaxInFlight(0)}},
		"WithMaxInFlight(-1)":                  {js, cons, []natsjs.Option{natsjs.WithMaxInFlight(-1)}},
		"WithProgressInterval(-1)":             {js, cons, []natsjs.Option{natsjs.WithProgressInterval(-1)}},
		"WithProgressInterval(AckWait)":        {js, cons, []natsjs.Option{natsjs.WithProgressInterval(2 * time.Second)}},
		"WithProgressInterval above a BackOff": {js, backoffCons, []natsjs.Option{natsjs.WithProgressInterval(time.Second)}},
		"WithGracePeriod(-1)":                  {js, cons, []natsjs.Option{natsjs.WithGracePeriod(-1)}},
		"WithHandlerTimeout(-1)":               {js, cons, []natsjs.Option{natsjs.WithHandlerTimeout(-1)}},
		"WithDeadLetterTimeout(-1)":            {js, cons, []natsjs.Option{natsjs.WithDeadLetterTimeout(-1)}},
		"WithKey(nil)":                         {js, cons, []natsjs.Option{natsjs.WithKey(nil)}},
		"WithDeadLetter(nil, subject)":         {js, cons, []natsjs.Option{natsjs.WithDeadLetter(nil, "dead")}},
		"WithDeadLetter(js, \"\")":             {js, cons, []natsjs.Option{natsjs.WithDeadLetter(js, "")}},
		"WithDeadLetter(js, wildcard)":         {js, cons, []natsjs.Option{natsjs.WithDeadLetter(js, "dead.*")}},
		"WithDeadLetter(js, full wild)":        {js, cons, []natsjs.Option{natsjs.WithDeadLetter(js, "dead.>")}},
		"WithDeadLetter(js, empty tok)":        {js, cons, []natsjs.Option{natsjs.WithDeadLetter(js, "dead..jobs")}},
		"WithDeadLetter(js, with space)":       {js, cons, []natsjs.Option{natsjs.WithDeadLetter(js, "dead jobs")}},
		"js of no JetStream":                   {nowhere, cons, nil},
		"js of another server":                 {otherJS, cons, nil},
		"nil option":                           {js, cons, []natsjs.Option{nil}},
		"a valid option, then an invalid one":  {js, cons, []natsjs.Option{natsjs.WithMaxInFlight(4), natsjs.WithMaxInFlight(0)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() {
				err = natsjs.Run(context.Background(), newPool(t, 1), tc.js, tc.cons, h, tc.opts...)
			})
			require.ErrorIs(t, err, jetstream.ErrInvalidOption)
			assert.True(t, strings.HasPrefix(err.Error(), "natsjs: "), err.Error())
		})
	}
	// The same options, valid, are accepted: the checks are not blanket.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, natsjs.Run(ctx, newPool(t, 1), js, backoffCons, h, natsjs.WithProgressInterval(800*time.Millisecond),
		natsjs.WithMaxInFlight(1), natsjs.WithDeadLetter(js, "dead.jobs"), natsjs.WithGracePeriod(0),
		natsjs.WithHandlerTimeout(0), natsjs.WithHandlerTimeout(time.Second),
		natsjs.WithDeadLetterTimeout(0), natsjs.WithDeadLetterTimeout(time.Second),
		natsjs.WithMaxBytes(0), natsjs.WithMaxBytes(-1), natsjs.WithMaxBytes(1)))
	requireTookNothing(t, cons, 3)
}

func TestDefaultBackoffIsBetweenHalfAndAllOfADoublingDelayUpToAMinute(t *testing.T) {
	base := []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for delivery, b := range base {
		seen := make(map[time.Duration]bool)
		for range 200 {
			d := natsjs.DefaultBackoff(uint64(delivery))
			require.GreaterOrEqual(t, d, b/2, "delivery %d", delivery)
			require.LessOrEqual(t, d, b, "delivery %d", delivery)
			seen[d] = true
		}
		// Jittered: 200 draws from half a second or more of nanoseconds
		// are not all alike.
		assert.Greater(t, len(seen), 100, "delivery %d: the delays are not spread", delivery)
	}
	d := natsjs.DefaultBackoff(1 << 62)
	assert.True(t, d >= 30*time.Second && d <= time.Minute, "%v", d)
}

// Issue 31's fourth failure: through a server 80ms of round trip away,
// Run whose ctx was cancelled while it read the consumer returned
// "reading consumer: context canceled", or said that js could not reach
// cons, wrapping jetstream.ErrInvalidOption. A ctx done while Run starts
// is a ctx done: Run returns nil, and loses nothing.
func TestRunWhoseCtxIsCancelledWhileItStartsReturnsNil(t *testing.T) {
	t.Parallel()
	const jobs = 20
	s := startServer(t)
	_, direct := connect(t, s)
	workQueue(t, direct, 30*time.Second, 0)
	publishJobs(t, direct, jobs)
	proxy := startLatencyProxy(t, s.Addr().String(), 40*time.Millisecond)
	nc, err := nats.Connect(proxy.url())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := js.Consumer(context.Background(), "JOBS", "workers")
	require.NoError(t, err)

	ta := newTally()
	h := func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	}
	// Every step of the start: the consumer read through cons, then
	// through js, the stream, the subscription, the first pull.
	for after := time.Duration(0); after <= 400*time.Millisecond; after += 20 * time.Millisecond {
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(after, cancel)
		err := natsjs.Run(ctx, newPool(t, 2), js, cons, h)
		timer.Stop()
		cancel()
		assert.NoError(t, err, "ctx cancelled %v after Run was called", after)
	}
	// Nothing was lost: what a Run took, it acked or handed back.
	stop := consuming(t, newPool(t, 4), direct, workQueueConsumer(t, direct), h)
	eventually(t, func() bool { return streamEmpty(direct, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stop())
	assert.Equal(t, jobs, ta.distinct())
}

// workQueueConsumer returns the consumer workQueue made, through js.
func workQueueConsumer(t testing.TB, js jetstream.JetStream) jetstream.Consumer {
	t.Helper()
	cons, err := js.Consumer(context.Background(), "JOBS", "workers")
	require.NoError(t, err)
	return cons
}

// A js whose requests fail for a reason that says nothing of where js
// leads (here the answer of a JetStream that is short of resources) is
// not an invalid option: Run returns the failure, not
// jetstream.ErrInvalidOption, whose meaning is that the caller passed
// something wrong.
func TestAFailureToReadTheConsumerThroughJsIsNoInvalidOption(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	nc, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 1)
	// Every request through the prefix $JS.busy.API is answered with an
	// error of the JetStream API that names no stream or consumer.
	sub, err := nc.Subscribe("$JS.busy.API.>", func(msg *nats.Msg) {
		_ = msg.Respond([]byte(`{"type":"io.nats.jetstream.api.v1.consumer_info_response","error":{"code":500,"err_code":10023,"description":"insufficient resources"}}`))
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	busy, err := jetstream.NewWithAPIPrefix(nc, "$JS.busy.API")
	require.NoError(t, err)

	err = natsjs.Run(context.Background(), newPool(t, 1), busy, cons, func(context.Context, jetstream.Msg) error {
		t.Error("a handler ran")
		return nil
	})
	require.Error(t, err)
	assert.NotErrorIs(t, err, jetstream.ErrInvalidOption, "%v", err)
	assert.Contains(t, err.Error(), "insufficient resources")
	assert.True(t, strings.HasPrefix(err.Error(), "natsjs: "), err.Error())
	requireTookNothing(t, cons, 1)
}
