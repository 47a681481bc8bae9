package main

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The command lists the dead letters Run published, redrives the ones it
// is told to, and the jobs run again with their original ids.
func TestTheCommandListsAndRedrivesDeadLetters(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(s.Shutdown)
	require.True(t, s.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c"} {
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "jobs." + id, Data: []byte(id), Header: nats.Header{"Nats-Msg-Id": {"job-" + id}}})
		require.NoError(t, err)
	}

	// Every job fails at first, and runs once redriven.
	handled := make(chan string, 10)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	p := workerpool.New(2)
	defer p.Stop()
	go func() {
		ran <- natsjs.Run(runCtx, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			if msg.Headers().Get("Natsjs-Redriven") == "" {
				return errors.New("bad day")
			}
			handled <- natsjs.OriginalID(msg)
			return nil
		}, natsjs.WithDeadLetter(js, "dead.jobs"))
	}()
	defer func() {
		stop()
		assert.NoError(t, <-ran)
	}()
	require.Eventually(t, func() bool {
		info, err := js.Stream(ctx, "DEAD")
		return err == nil && info.CachedInfo().State.Msgs == 3
	}, 30*time.Second, 10*time.Millisecond, "the jobs were not dead-lettered")

	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"-server", s.ClientURL(), "-stream", "DEAD"}, &out))
	for _, want := range []string{"jobs.a", "jobs.b", "jobs.c", "job-a", "bad day", "3 dead letters"} {
		assert.Contains(t, out.String(), want)
	}

	out.Reset()
	require.NoError(t, run(ctx, []string{"-server", s.ClientURL(), "-stream", "DEAD", "-redrive", "1,3"}, &out))
	assert.Equal(t, "1: redriven\n3: redriven\n", out.String())
	got := map[string]bool{}
	for range 2 {
		select {
		case id := <-handled:
			got[id] = true
		case <-time.After(30 * time.Second):
			t.Fatal("a redriven job did not run")
		}
	}
	assert.Len(t, got, 2)

	out.Reset()
	require.NoError(t, run(ctx, []string{"-server", s.ClientURL(), "-stream", "DEAD", "-redrive", "all"}, &out))
	assert.Equal(t, "2: redriven\n", out.String())
	select {
	case id := <-handled:
		got[id] = true
	case <-time.After(30 * time.Second):
		t.Fatal("the last redriven job did not run")
	}
	assert.Equal(t, map[string]bool{"job-a": true, "job-b": true, "job-c": true}, got)

	out.Reset()
	require.Error(t, run(ctx, []string{"-server", s.ClientURL(), "-stream", "DEAD", "-redrive", "2"}, &out), "a dead letter redriven twice")
}
