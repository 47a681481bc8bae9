package natsjs_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireAtLeastOnce checks that jobs 0..n-1 were each handled, and that
// at most maxDup handlings were repeats.
func requireAtLeastOnce(t *testing.T, ta *tally, n, maxDup int) {
	t.Helper()
	counts := ta.snapshot()
	total := 0
	for i := range n {
		c := counts[strconv.Itoa(i)]
		assert.GreaterOrEqual(t, c, 1, "job %d lost", i)
		total += c
	}
	assert.Len(t, counts, n)
	assert.LessOrEqual(t, total-n, maxDup, "too many duplicates")
	t.Logf("%d jobs, %d handlings, %d duplicates (bound %d)", n, total, total-n, maxDup)
}

func TestALostConnectionLosesNothingAndRunCarriesOn(t *testing.T) {
	t.Parallel() // waits on the clock, not the CPU
	const jobs, inFlight = 200, 8
	s := startServer(t)
	nc, js := connect(t, s)
	cons := workQueue(t, js, 2*time.Second, 0)
	publishJobs(t, js, jobs)

	ta := newTally()
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		time.Sleep(5 * time.Millisecond)
		ta.add(msg)
		return nil
	}, natsjs.WithMaxInFlight(inFlight))

	// The server drops the connection twice while the process works; the
	// second time, once the client is back, under an id the server knows.
	for i, after := range []int{jobs / 5, jobs / 2} {
		eventually(t, func() bool { return ta.distinct() >= after })
		eventually(t, func() bool { return nc.IsConnected() && nc.Stats().Reconnects >= uint64(i) },
			"the client did not reconnect")
		id, err := nc.GetClientID()
		require.NoError(t, err)
		require.NoError(t, s.DisconnectClientByID(id))
	}
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left after reconnecting")
	require.NoError(t, stop())
	requireAtLeastOnce(t, ta, jobs, 2*inFlight)
	assert.GreaterOrEqual(t, nc.Stats().Reconnects, uint64(2))
}

func TestAServerRestartLosesNothingAndRunCarriesOn(t *testing.T) {
	t.Parallel() // waits on the clock, not the CPU
	const jobs, inFlight = 100, 8
	dir := t.TempDir()
	port := restartablePort(t)
	s := startServerAt(t, port, dir)
	nc, js := connect(t, s)
	cons := workQueue(t, js, 2*time.Second, 0)
	publishJobs(t, js, jobs)

	ta := newTally()
	log := newEventLog()
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		time.Sleep(5 * time.Millisecond)
		ta.add(msg)
		return nil
	}, natsjs.WithMaxInFlight(inFlight), log.errorHandler())

	eventually(t, func() bool { return ta.distinct() >= jobs/4 })
	log.add("restarting the server, %d jobs handled", ta.distinct())
	s.Shutdown()
	s.WaitForShutdown()
	startServerAt(t, port, dir)
	eventually(t, func() bool { return nc.IsConnected() }, "did not reconnect")
	log.add("reconnected")

	// Failed once in about 70 runs of v2's package, on its Fetch path,
	// unexplained: if it fails again, say what Run saw.
	if !assert.Eventually(t, func() bool { return streamEmpty(js, "JOBS") }, waitFor, 5*time.Millisecond, "jobs left after the restart") {
		info, err := cons.Info(context.Background())
		log.add("consumer info: %+v, error %v", info, err)
		log.add("%d jobs handled; Run returned %v", ta.distinct(), stop())
		log.print(t)
		t.FailNow()
	}
	require.NoError(t, stop())
	// A restart is a server that may lose acks it had read: the README
	// ("Acks, their confirmation, and how many duplicates") bounds the
	// duplicates by what the process held plus up to WithMaxInFlight
	// more. (9 of 8 once, in a -count=10 run of v2 with WithJetStream.)
	requireAtLeastOnce(t, ta, jobs, 2*inFlight)
}

func TestAClosedConnectionEndsRunAndItsMessagesGoElsewhere(t *testing.T) {
	t.Parallel() // waits on the clock, not the CPU
	const jobs = 60
	s := startServer(t)
	ncA, jsA := connect(t, s)
	consA := workQueue(t, jsA, 2*time.Second, 0)
	publishJobs(t, jsA, jobs)

	ta := newTally()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		consumed <- natsjs.Run(ctx, newPool(t, 2), jsA, consA, func(ctx context.Context, msg jetstream.Msg) error {
			time.Sleep(10 * time.Millisecond)
			ta.add(msg)
			return nil
		}, natsjs.WithMaxInFlight(6))
	}()
	eventually(t, func() bool { return ta.distinct() >= jobs/4 })
	ncA.Close()
	select {
	case err := <-consumed:
		assert.True(t, errors.Is(err, nats.ErrConnectionClosed), "%v", err)
	case <-time.After(waitFor):
		t.Fatal("Run went on after its connection was closed")
	}

	// Another process, on its own connection, gets everything left,
	// including what A held when its connection closed, after AckWait.
	_, jsB := connect(t, s)
	consB, err := jsB.Consumer(context.Background(), "JOBS", "workers")
	require.NoError(t, err)
	stopB := consuming(t, newPool(t, 4), jsB, consB, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	})
	eventually(t, func() bool { return streamEmpty(jsB, "JOBS") }, "jobs left")
	require.NoError(t, stopB())
	requireAtLeastOnce(t, ta, jobs, 6)
}
