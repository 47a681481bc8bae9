package natsjs_test

import (
	"context"
	"strconv"
	"strings"
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

// publishSized publishes a job of size bytes of payload on jobs.<id>, with
// payload starting with id and a space, and waits for the stream to store
// it.
func publishSized(t testing.TB, js jetstream.JetStream, id string, size int) {
	t.Helper()
	data := []byte(id + " " + strings.Repeat("x", max(size-len(id)-1, 0)))
	_, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: "jobs." + id, Data: data})
	require.NoError(t, err)
}

// jobID returns the id publishSized put in msg.
func jobID(msg jetstream.Msg) string {
	id, _, _ := strings.Cut(string(msg.Data()), " ")
	return id
}

// heldPeak watches what the server counts delivered to cons and not acked,
// every few milliseconds until stop is called, which returns the peak.
func heldPeak(t testing.TB, cons jetstream.Consumer) (peak func() int, stop func() int) {
	var top atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if info, err := cons.Info(context.Background()); err == nil && int64(info.NumAckPending) > top.Load() {
				top.Store(int64(info.NumAckPending))
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	var once sync.Once
	stop = func() int {
		once.Do(func() { close(done); wg.Wait() })
		return int(top.Load())
	}
	t.Cleanup(func() { stop() })
	return func() int { return int(top.Load()) }, stop
}

func TestRunNeverHoldsMoreThanItsByteBound(t *testing.T) {
	t.Parallel()
	const jobs, size, bound = 30, 100 << 10, 1 << 20 // at most 10 messages of 100 KiB and a little
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	for i := range jobs {
		publishSized(t, js, strconv.Itoa(i), size)
	}

	// Eight handlers block, and each runner would have 20 messages ahead
	// of it: only the byte bound holds Run back.
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	var running atomic.Int32
	ta := newTally()
	peak, stopWatch := heldPeak(t, cons)
	stop := consuming(t, newPool(t, 8), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		running.Add(1)
		<-release
		ta.add(msg)
		return nil
	}, natsjs.WithMaxBytes(bound), natsjs.WithAhead(20))
	eventually(t, func() bool { return running.Load() == 8 && peak() >= 9 }, "Run did not fill its byte bound")
	// Whatever the timing, it stays within it. (What the server counts
	// unacked is what Run holds while its handlers block; once they run,
	// it counts acks the server has not processed yet too.)
	for range 20 {
		assert.LessOrEqual(t, consumerInfo(t, cons).NumAckPending, 10)
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, stopWatch(), 10, "held more than the byte bound")
	free()
	eventually(t, func() bool { return ta.distinct() == jobs }, "not every job handled")
	require.NoError(t, stop())
	assert.Equal(t, int32(jobs), running.Load(), "a job was handled twice")
}

// The default bound, 64 MiB, holds 64 messages of NATS's largest default
// payload, 1 MiB, where v3 held what the horizon said, hundreds.
func TestTheDefaultByteBoundHoldsAServiceCanLiveWith(t *testing.T) {
	t.Parallel()
	const jobs, size = 70, 1<<20 - 1<<10
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	for i := range jobs {
		publishSized(t, js, strconv.Itoa(i), size)
	}
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	ta := newTally()
	peak, stopWatch := heldPeak(t, cons)
	stop := consuming(t, newPool(t, 8), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		<-release
		ta.add(msg)
		return nil
	}, natsjs.WithAhead(jobs))
	eventually(t, func() bool { return peak() >= 60 }, "Run did not fill its byte bound")
	for range 20 {
		assert.LessOrEqual(t, consumerInfo(t, cons).NumAckPending, natsjs.DefaultMaxBytes/size)
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, stopWatch(), natsjs.DefaultMaxBytes/size, "held more than the default byte bound")
	free()
	eventually(t, func() bool { return ta.distinct() == jobs }, "not every job handled")
	require.NoError(t, stop())
}

// A message larger than the bound on its own is not stuck: Run takes it
// alone, and nothing else while it runs.
func TestAMessageLargerThanTheByteBoundIsHandledAlone(t *testing.T) {
	t.Parallel()
	const bound = 16 << 10
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	sizes := map[string]int{}
	for i := range 20 {
		size := 1 << 10
		if i%4 == 1 {
			size = 4 * bound
		}
		id := strconv.Itoa(i)
		sizes[id] = size
		publishSized(t, js, id, size)
	}

	ta := newTally()
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if sizes[jobID(msg)] > bound {
			assert.Equal(t, 1, consumerInfo(t, cons).NumAckPending, "held more beside a message larger than the bound")
		}
		ta.add(msg)
		return nil
	}, natsjs.WithMaxBytes(bound))
	eventually(t, func() bool { return ta.distinct() == len(sizes) }, "not every job handled")
	require.NoError(t, stop())
	for id, n := range ta.snapshot() {
		assert.Equal(t, 1, n, "job %s", id)
	}
}

// A consumer's MaxRequestMaxBytes bounds every pull's max_bytes: Run fits
// its pulls to it, and a message larger still comes alone, in a pull
// without max_bytes, which the server allows.
func TestRunFitsItsPullsToTheConsumersMaxRequestMaxBytes(t *testing.T) {
	t.Parallel()
	const limit = 4 << 10
	s := startServer(t)
	_, js := connect(t, s)
	workQueue(t, js, 30*time.Second, 0)
	require.NoError(t, js.DeleteConsumer(context.Background(), "JOBS", "workers"))
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "JOBS", jetstream.ConsumerConfig{
		Durable: "limited", AckPolicy: jetstream.AckExplicitPolicy, MaxRequestMaxBytes: limit,
	})
	require.NoError(t, err)
	for i := range 40 {
		size := 512
		if i == 7 {
			size = 3 * limit
		}
		publishSized(t, js, strconv.Itoa(i), size)
	}
	ta := newTally()
	var hook hookLog
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	}, hook.option())
	eventually(t, func() bool { return ta.distinct() == 40 }, "not every job handled")
	require.NoError(t, stop())
	assert.Empty(t, hook.all(), "a pull was refused")
}

// Issue 37's fifth failure: each pull was sized by the largest message
// ever seen, so after one message of 160 KiB under a bound of 256 KiB, Run
// held one message at a time for the rest of the run (42ms per job of
// 40ms on 8 workers). The size a pull plans for follows the recent
// messages: once small ones come again, the workers run side by side.
func TestOneLargeMessageDoesNotShrinkThePullsForTheRestOfTheRun(t *testing.T) {
	t.Parallel()
	const bound, large, small, jobs = 256 << 10, 160 << 10, 1 << 10, 120
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishSized(t, js, "large", large)
	for i := range jobs {
		publishSized(t, js, strconv.Itoa(i), small)
	}

	var mu sync.Mutex
	largeDone := false
	running, peak := 0, 0 // handlers of small jobs started after the large one finished
	ta := newTally()
	stop := consuming(t, newPool(t, 8), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		defer ta.add(msg)
		if jobID(msg) == "large" {
			time.Sleep(40 * time.Millisecond)
			mu.Lock()
			largeDone = true
			mu.Unlock()
			return nil
		}
		mu.Lock()
		counted := largeDone
		if counted {
			running++
			peak = max(peak, running)
		}
		mu.Unlock()
		time.Sleep(40 * time.Millisecond)
		if counted {
			mu.Lock()
			running--
			mu.Unlock()
		}
		return nil
	}, natsjs.WithMaxBytes(bound))
	eventually(t, func() bool { return ta.distinct() == jobs+1 }, "not every job handled")
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	// 8 workers; 4 leaves room for a slow machine.
	assert.GreaterOrEqual(t, peak, 4, "after the large message, Run held one message at a time")
	t.Logf("at most %d handlers at once after the large message", peak)
}
