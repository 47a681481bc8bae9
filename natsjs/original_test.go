package natsjs_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
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

// A copy a stop publishes has a sequence and a Nats-Msg-Id of its own;
// OriginalID is the first original's, for a job whose publisher set an id
// and for one whose publisher did not, through copies of copies.
func TestOriginalIDIsTheSameForAMessageAndEveryCopyOfIt(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 5)
	_, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: "jobs.a", Data: []byte("a"), Header: nats.Header{"Nats-Msg-Id": {"order-7"}}})
	require.NoError(t, err)
	ack, err := js.Publish(context.Background(), "jobs.b", []byte("b"))
	require.NoError(t, err)

	var mu sync.Mutex
	ids := map[string][]string{} // by job, each delivery's OriginalID
	seqs := map[string][]uint64{}
	record := func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		ids[string(msg.Data())] = append(ids[string(msg.Data())], natsjs.OriginalID(msg))
		seqs[string(msg.Data())] = append(seqs[string(msg.Data())], md.Sequence.Stream)
	}
	// Two stops catch both jobs, running: each hands back a copy.
	for range 2 {
		started := make(chan struct{}, 2)
		stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			record(msg)
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, natsjs.WithGracePeriod(0))
		recv(t, started, "a handler")
		recv(t, started, "a handler")
		require.NoError(t, stop())
	}
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		record(msg)
		return nil
	})
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
	require.NoError(t, stop())

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"order-7", "order-7", "order-7"}, ids["a"])
	require.Len(t, ids["b"], 3)
	assert.Regexp(t, `^JOBS:`+strconv.FormatUint(ack.Sequence, 10)+`:\d+$`, ids["b"][0])
	assert.Equal(t, []string{ids["b"][0], ids["b"][0], ids["b"][0]}, ids["b"])
	assert.Len(t, slices.Compact(seqs["b"]), 3, "the copies did not have sequences of their own: the test missed")
}

// OriginalID is the same for a message and all its copies,
// whichever made them: a snooze copy, a stop copy of that copy, the dead
// letter of the stop copy, and the job Redrive brings back.
func TestOriginalIDIsTheSameThroughSnoozeStopDeadLetterAndRedrive(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 3)
	dead, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "jobs.x", []byte("x")) // no Nats-Msg-Id
	require.NoError(t, err)

	var mu sync.Mutex
	var ids []string
	record := func(msg jetstream.Msg) int {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, natsjs.OriginalID(msg))
		return len(ids)
	}
	started := make(chan struct{}, 4)
	stopA := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if record(msg) == 1 {
			return natsjs.Snooze(20 * time.Millisecond)
		}
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, natsjs.WithGracePeriod(0))
	recv(t, started, "the snoozed copy's handler")
	require.NoError(t, stopA())

	stopB := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		record(msg)
		return natsjs.Permanent(errors.New("bad"))
	}, natsjs.WithDeadLetter(js, "dead.jobs"))
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 && streamEmpty(js, "JOBS") }, "not dead-lettered")
	require.NoError(t, stopB())
	dls := deadLetters(t, js)
	require.Len(t, dls, 1)
	require.NoError(t, natsjs.Redrive(context.Background(), js, dead, dls[0].Sequence))

	var done atomic.Bool
	stopC := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		record(msg)
		done.Store(true)
		return nil
	})
	eventually(t, done.Load, "the redriven job did not run")
	require.NoError(t, stopC())

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ids, 4)
	require.NotEmpty(t, ids[0])
	for i, id := range ids {
		assert.Equal(t, ids[0], id, "copy %d has another OriginalID (all: %v)", i, ids)
	}
	assert.Equal(t, ids[0], dls[0].OriginalID, "the dead letter's OriginalID differs")
}
