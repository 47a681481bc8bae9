package natsjs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConsumeReturnsAnErrorForNilArguments(t *testing.T) {
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 1)
	p := newPool(t, 1)
	h := func(context.Context, jetstream.Msg) error {
		t.Error("a handler ran")
		return nil
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"nil ctx", func() error { return natsjs.Consume(nil, p, cons, h) }}, //nolint:staticcheck // the point of the test
		{"nil pool", func() error { return natsjs.Consume(context.Background(), nil, cons, h) }},
		{"nil consumer", func() error { return natsjs.Consume(context.Background(), p, nil, h) }},
		{"nil handler", func() error { return natsjs.Consume(context.Background(), p, cons, nil) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "natsjs: "), err.Error())
		})
	}
	assert.Zero(t, consumerInfo(t, cons).NumAckPending, "a message was taken")
}

func TestConsumeReturnsAnErrorForAConsumerItCannotServe(t *testing.T) {
	s := startServer(t)
	_, js := connect(t, s)
	workQueue(t, js, 2*time.Second, 0)
	p := newPool(t, 1)
	h := func(context.Context, jetstream.Msg) error { return nil }
	// A work-queue stream refuses such consumers; a limits stream does not.
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LOGS", Subjects: []string{"logs.>"}})
	require.NoError(t, err)
	for _, policy := range []jetstream.AckPolicy{jetstream.AckNonePolicy, jetstream.AckAllPolicy} {
		t.Run(policy.String(), func(t *testing.T) {
			cons, err := js.CreateOrUpdateConsumer(context.Background(), "LOGS", jetstream.ConsumerConfig{
				Durable:   "acks-" + fmt.Sprint(int(policy)),
				AckPolicy: policy,
			})
			require.NoError(t, err)
			err = natsjs.Consume(context.Background(), p, cons, h)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "AckExplicit")
		})
	}
	t.Run("progress interval not below AckWait", func(t *testing.T) {
		cons, err := js.Consumer(context.Background(), "JOBS", "workers")
		require.NoError(t, err)
		err = natsjs.Consume(context.Background(), p, cons, h, natsjs.WithProgressInterval(2*time.Second))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "AckWait")
	})
}

func TestImpossibleOptionsPanicWithANatsjsMessage(t *testing.T) {
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	cases := map[string]func(){
		"WithMaxInFlight(0)":             func() { natsjs.WithMaxInFlight(0) },
		"WithMaxInFlight(-1)":            func() { natsjs.WithMaxInFlight(-1) },
		"WithProgressInterval(-1)":       func() { natsjs.WithProgressInterval(-1) },
		"WithDeadLetter(nil, subject)":   func() { natsjs.WithDeadLetter(nil, "dead") },
		"WithDeadLetter(js, \"\")":       func() { natsjs.WithDeadLetter(js, "") },
		"WithDeadLetter(js, wildcard)":   func() { natsjs.WithDeadLetter(js, "dead.*") },
		"WithDeadLetter(js, full wild)":  func() { natsjs.WithDeadLetter(js, "dead.>") },
		"WithDeadLetter(js, empty tok)":  func() { natsjs.WithDeadLetter(js, "dead..jobs") },
		"WithDeadLetter(js, with space)": func() { natsjs.WithDeadLetter(js, "dead jobs") },
		"nil option": func() {
			_ = natsjs.Consume(context.Background(), newPool(t, 1), cons,
				func(context.Context, jetstream.Msg) error { return nil }, nil)
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				v := recover()
				require.NotNil(t, v, "no panic")
				msg, ok := v.(string)
				require.True(t, ok, "panic value %#v is not a string", v)
				assert.True(t, strings.HasPrefix(msg, "natsjs: "), msg)
			}()
			call()
		})
	}
}

func TestDefaultBackoffDoublesFromOneSecondUpToAMinute(t *testing.T) {
	want := []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for delivery, d := range want {
		assert.Equal(t, d, natsjs.DefaultBackoff(uint64(delivery)), "delivery %d", delivery)
	}
	assert.Equal(t, time.Minute, natsjs.DefaultBackoff(1<<62))
}

func TestAHandlerMaySettleItsMessageItself(t *testing.T) {
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 3)

	ta := newTally()
	stop := consuming(t, newPool(t, 2, workerpool.WithPanicHandler(func(*workerpool.PanicError) {})), cons,
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
