package natsjs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deadLetters returns what DeadLetters reads from stream DEAD.
func deadLetters(t *testing.T, js jetstream.JetStream) []*natsjs.DeadLetter {
	t.Helper()
	dead, err := js.Stream(context.Background(), "DEAD")
	require.NoError(t, err)
	var out []*natsjs.DeadLetter
	for dl, err := range natsjs.DeadLetters(context.Background(), dead) {
		require.NoError(t, err)
		out = append(out, dl)
	}
	return out
}

// A dead letter redriven is a job like any other, with every attempt and
// its original id; if it fails for good again, its new dead letter is
// stored, not taken for a duplicate of the one Redrive removed.
func TestARedrivenDeadLetterIsAJobAgainWithItsOriginalID(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 2)
	dead, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	_, err = js.PublishMsg(context.Background(), &nats.Msg{Subject: "jobs.a", Data: []byte("a"),
		Header: nats.Header{"Nats-Msg-Id": {"order-7"}, "X-Tenant": {"acme"}}})
	require.NoError(t, err)

	var mu sync.Mutex
	var ids []string
	fail := true
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, natsjs.OriginalID(msg))
		assert.Equal(t, "acme", msg.Headers().Get("X-Tenant"))
		if fail {
			return errors.New("boom")
		}
		return nil
	}, natsjs.WithDeadLetter(js, "dead.jobs"), natsjs.WithBackoff(func(uint64) time.Duration { return 0 }))
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 }, "not dead-lettered")

	// Listed, then redriven: it fails for good again, after both attempts.
	dls := deadLetters(t, js)
	require.Len(t, dls, 1)
	assert.Equal(t, "jobs.a", dls[0].Subject)
	assert.Equal(t, "JOBS", dls[0].Stream)
	assert.Equal(t, "workers", dls[0].Consumer)
	assert.Equal(t, uint64(2), dls[0].Attempts)
	assert.Equal(t, "boom", dls[0].Error)
	assert.Equal(t, "order-7", dls[0].OriginalID)
	require.NoError(t, natsjs.Redrive(context.Background(), js, dead, dls[0].Sequence))
	eventually(t, func() bool { return len(deadLetters(t, js)) == 1 && deadLetters(t, js)[0].Redriven == 1 }, "the redriven job's new dead letter was not stored")

	// Redriven again, it succeeds.
	mu.Lock()
	fail = false
	mu.Unlock()
	require.NoError(t, natsjs.Redrive(context.Background(), js, dead, deadLetters(t, js)[0].Sequence))
	eventually(t, func() bool { return streamEmpty(js, "JOBS") && streamEmpty(js, "DEAD") }, "the redriven job was not handled")
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"order-7", "order-7", "order-7", "order-7", "order-7"}, ids, "2 attempts, 2 after the first redrive, 1 after the second")
}

// A dead letter whose subject, in a stream keeping the latest job of each
// subject, has a newer job is superseded: Redrive leaves it, and the newer
// job, alone.
func TestRedriveNeverReplacesANewerJobOfItsSubject(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy, MaxMsgsPerSubject: 1,
	})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1,
	})
	require.NoError(t, err)
	dead, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.a", []byte("v1"))
	require.NoError(t, err)
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		return errors.New("boom")
	}, natsjs.WithDeadLetter(js, "dead.jobs"))
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 && streamEmpty(js, "JOBS") }, "not dead-lettered")
	require.NoError(t, stop())
	_, err = js.Publish(context.Background(), "jobs.a", []byte("v2"))
	require.NoError(t, err)

	err = natsjs.Redrive(context.Background(), js, dead, deadLetters(t, js)[0].Sequence)
	require.ErrorIs(t, err, natsjs.ErrSuperseded)
	assert.Equal(t, uint64(1), streamMsgs(t, js, "DEAD"), "the dead letter was removed")
	st, err := js.Stream(context.Background(), "JOBS")
	require.NoError(t, err)
	raw, err := st.GetLastMsgForSubject(context.Background(), "jobs.a")
	require.NoError(t, err)
	assert.Equal(t, "v2", string(raw.Data), "the newer job was replaced")
}

// deadLetterOne makes a DEAD stream and a JOBS work queue (MaxDeliver 1),
// publishes one job and fails it for good; it returns the DEAD stream and
// the dead letter's sequence.
func deadLetterOne(t *testing.T, js jetstream.JetStream) (jetstream.Stream, jetstream.Consumer, uint64) {
	t.Helper()
	cons := workQueue(t, js, 30*time.Second, 1)
	dead, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.x", []byte("x"))
	require.NoError(t, err)
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		return errors.New("boom")
	}, natsjs.WithDeadLetter(js, "dead.jobs"))
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 && streamEmpty(js, "JOBS") }, "not dead-lettered")
	require.NoError(t, stop())
	dls := deadLetters(t, js)
	require.Len(t, dls, 1)
	return dead, cons, dls[0].Sequence
}

// Redriving one dead letter twice in a row, or ten times at once, stores
// its job once, and the dead letter is gone.
func TestRedrivingOneDeadLetterTwiceOrConcurrentlyStoresTheJobOnce(t *testing.T) {
	t.Parallel()
	t.Run("twice", func(t *testing.T) {
		t.Parallel()
		s := startServer(t)
		_, js := connect(t, s)
		dead, _, seq := deadLetterOne(t, js)
		require.NoError(t, natsjs.Redrive(context.Background(), js, dead, seq))
		err := natsjs.Redrive(context.Background(), js, dead, seq)
		assert.Error(t, err, "a second redrive of a deleted dead letter succeeded")
		assert.Equal(t, uint64(1), streamMsgs(t, js, "JOBS"), "the job was stored twice")
		assert.Zero(t, streamMsgs(t, js, "DEAD"))
	})
	t.Run("concurrently", func(t *testing.T) {
		t.Parallel()
		s := startServer(t)
		_, js := connect(t, s)
		dead, _, seq := deadLetterOne(t, js)
		var wg sync.WaitGroup
		var oks atomic.Int32
		var errs sync.Map
		for i := range 10 {
			wg.Go(func() {
				if err := natsjs.Redrive(context.Background(), js, dead, seq); err == nil {
					oks.Add(1)
				} else {
					errs.Store(i, err.Error())
				}
			})
		}
		wg.Wait()
		assert.GreaterOrEqual(t, oks.Load(), int32(1))
		assert.Equal(t, uint64(1), streamMsgs(t, js, "JOBS"), "concurrent redrives stored the job %d times", streamMsgs(t, js, "JOBS"))
		assert.Zero(t, streamMsgs(t, js, "DEAD"))
	})
}

// A redrive whose stream is gone, or whose subject another
// stream captures now, or of a message that is no dead letter, returns an
// error and changes nothing.
func TestARedriveThatCannotReachItsStreamChangesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	dead, _, seq := deadLetterOne(t, js)
	require.NoError(t, js.DeleteStream(context.Background(), "JOBS"))
	err := natsjs.Redrive(context.Background(), js, dead, seq)
	assert.Error(t, err, "a redrive to a deleted stream succeeded")
	assert.Equal(t, uint64(1), streamMsgs(t, js, "DEAD"), "the dead letter was deleted")

	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"jobs.>"}})
	require.NoError(t, err)
	err = natsjs.Redrive(context.Background(), js, dead, seq)
	assert.Error(t, err, "a redrive went to another stream")
	assert.Equal(t, uint64(1), streamMsgs(t, js, "DEAD"), "the dead letter was deleted")
	assert.Zero(t, streamMsgs(t, js, "OTHER"), "the job went to another stream")

	// A message of the dead-letter stream that Run did not publish.
	_, err = js.Publish(context.Background(), "dead.jobs", []byte("not a dead letter"))
	require.NoError(t, err)
	info, err := dead.Info(context.Background())
	require.NoError(t, err)
	err = natsjs.Redrive(context.Background(), js, dead, info.State.LastSeq)
	assert.Error(t, err)
	assert.Equal(t, uint64(2), streamMsgs(t, js, "DEAD"))
	assert.Zero(t, streamMsgs(t, js, "OTHER"))
	// A sequence past the end.
	assert.Error(t, natsjs.Redrive(context.Background(), js, dead, 999))
	assert.Len(t, deadLetters(t, js), 1, "DeadLetters must skip the foreign message")
}
