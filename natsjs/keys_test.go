package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// subjectKey is the key of a job published on jobs.<key>.<n>.
func subjectKey(msg jetstream.Msg) string { return strings.Split(msg.Subject(), ".")[1] }

// publishKeyed publishes, in order, a job on jobs.<key>.<n> for each key
// of keys, n counting the jobs of each key from 0, with payload
// "<key>.<n>".
func publishKeyed(t testing.TB, js jetstream.JetStream, keys ...string) {
	t.Helper()
	count := map[string]int{}
	for _, key := range keys {
		id := fmt.Sprintf("%s.%d", key, count[key])
		count[key]++
		_, err := js.PublishAsync("jobs."+id, []byte(id))
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(waitFor):
		t.Fatal("publishing timed out")
	}
}

// A keyLog records, for each key, the jobs its handlers ran in the order
// they started, how many ran at once at most, and when each ended, in a
// sequence of events.
type keyLog struct {
	mu      sync.Mutex
	events  int
	order   map[string][]int // key: n of its jobs, as they started
	running map[string]int
	peak    map[string]int
	start   map[string]int // job: the event of its start
	end     map[string]int // job: the event of its end
}

func newKeyLog() *keyLog {
	return &keyLog{order: map[string][]int{}, running: map[string]int{}, peak: map[string]int{}, start: map[string]int{}, end: map[string]int{}}
}

// run records job (key.n) from its start to the end of work.
func (l *keyLog) run(job string, work func()) {
	key, ns, _ := strings.Cut(job, ".")
	n, _ := strconv.Atoi(ns)
	l.mu.Lock()
	l.events++
	l.start[job] = l.events
	l.order[key] = append(l.order[key], n)
	l.running[key]++
	l.peak[key] = max(l.peak[key], l.running[key])
	l.mu.Unlock()
	work()
	l.mu.Lock()
	l.events++
	l.end[job] = l.events
	l.running[key]--
	l.mu.Unlock()
}

func (l *keyLog) handled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.end)
}

func TestAFloodOfOneKeyNeverOvertakesItselfAndOtherKeysRunBesideIt(t *testing.T) {
	t.Parallel()
	// 150 jobs of the key hot, 2ms each: 300ms on one worker at least;
	// then one job of each of 20 other keys; then 50 more of hot.
	var keys []string
	for range 150 {
		keys = append(keys, "hot")
	}
	for i := range 20 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	for range 50 {
		keys = append(keys, "hot")
	}
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishKeyed(t, js, keys...)

	l := newKeyLog()
	stop := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		l.run(string(msg.Data()), func() {
			if subjectKey(msg) == "hot" {
				time.Sleep(2 * time.Millisecond)
			}
		})
		return nil
	}, natsjs.WithKey(subjectKey))
	eventually(t, func() bool { return l.handled() == len(keys) }, "not every job handled")
	require.NoError(t, stop())

	l.mu.Lock()
	defer l.mu.Unlock()
	for key, order := range l.order {
		assert.Equal(t, 1, l.peak[key], "two jobs of key %s ran at once", key)
		for i, n := range order {
			if !assert.Equal(t, i, n, "key %s: its jobs started out of order", key) {
				break
			}
		}
	}
	assert.Len(t, l.order["hot"], 200, "a job of hot ran twice or not at all")
	// The other keys did not wait for hot: they were all done before hot
	// was half done, though delivered after three quarters of its jobs.
	for i := range 20 {
		assert.Less(t, l.end[fmt.Sprint("k", i, ".0")], l.start["hot.100"], "key k%d waited for the hot key", i)
	}
}

// A message of a key that failed comes back; its redelivery waits for the
// key's running task, as any task of the key does.
func TestARedeliveredMessageOfAKeyWaitsForTheKey(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishKeyed(t, js, "k", "k") // k.0, k.1

	p := newPool(t, 4)
	l := newKeyLog()
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	stop := consuming(t, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		require.NoError(t, err)
		job := string(msg.Data())
		if md.NumDelivered > 1 {
			job += " again"
		}
		var failed bool
		l.run(job, func() {
			switch {
			case job == "k.0":
				failed = true // comes back at once (backoff 0)
			case job == "k.1":
				<-release
			}
		})
		if failed {
			return errors.New("first delivery fails")
		}
		return nil
	}, natsjs.WithKey(subjectKey), natsjs.WithBackoff(func(uint64) time.Duration { return 0 }))
	// k.1 runs; k.0, redelivered, waits for the key in the pool.
	eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.start["k.1"] > 0 && consumerInfo(t, cons).Delivered.Consumer == 3 && p.Status().Waiting == 1
	}, "k.0 was not redelivered behind the running k.1")
	free()
	eventually(t, func() bool { return l.handled() == 3 }, "not every job handled")
	require.NoError(t, stop())
	l.mu.Lock()
	defer l.mu.Unlock()
	assert.Greater(t, l.start["k.0 again"], l.end["k.1"], "the redelivered k.0 ran beside k.1")
	assert.Equal(t, 1, l.peak["k"])
}

// Run's keys are the pool's, or the sub-pool's: a task submitted there
// with the same key waits for Run's task of that key.
func TestRunsKeysAreThePoolsKeys(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishKeyed(t, js, "acme")

	p := newPool(t, 4)
	sub := p.Subpool("jobs", 2)
	started := make(chan struct{})
	release := make(chan struct{})
	var handlerDone, taskRan atomic.Int64 // Unix nanoseconds
	stop := consuming(t, sub, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		close(started)
		<-release
		handlerDone.Store(time.Now().UnixNano())
		return nil
	}, natsjs.WithKey(subjectKey))
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the pool's Stop, which waits for the handler
	recv(t, started, "the handler")
	done := make(chan struct{})
	require.NoError(t, sub.SubmitKey("acme", func() {
		taskRan.Store(time.Now().UnixNano())
		close(done)
	}))
	// The other task of acme waits for Run's, on a free worker.
	eventually(t, func() bool { return sub.Status().Waiting == 1 }, "the other task of the key is not waiting")
	free()
	recv(t, done, "the other task of the key")
	require.NoError(t, stop())
	assert.Greater(t, taskRan.Load(), handlerDone.Load(), "the other task of the key ran beside Run's")
}

// At a stop, a key's messages that wait in the pool for its running task
// are handed back at once; their tasks, when the pool runs them, do
// nothing.
func TestAStopHandsBackAKeysWaitingMessagesAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishKeyed(t, js, "k", "k", "k")

	p := newPool(t, 4)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	ta := newTally()
	stopA := consuming(t, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		<-release // ignores its ctx
		return nil
	}, natsjs.WithKey(subjectKey), natsjs.WithGracePeriod(time.Hour))
	eventually(t, func() bool { return ta.distinct() == 1 && p.Status().Waiting == 2 }, "k.1 and k.2 do not wait for k.0")
	stoppedA := make(chan error, 1)
	go func() { stoppedA <- stopA() }()

	tb := newTally()
	stopB := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		tb.add(msg)
		return nil
	})
	eventually(t, func() bool { return tb.distinct() == 2 }, "the waiting messages were not handed back")
	assert.Equal(t, map[string]int{"k.1": 1, "k.2": 1}, tb.snapshot())
	free()
	require.NoError(t, recv(t, stoppedA, "A's Run"))
	require.NoError(t, stopB())
	// The pool ran the tasks of k.1 and k.2: they did nothing.
	eventually(t, func() bool { return p.Status().Waiting == 0 && p.Status().Busy == 0 }, "the pool kept Run's tasks")
	assert.Equal(t, map[string]int{"k.0": 1}, ta.snapshot())
	assert.True(t, streamEmpty(js, "JOBS"))
}

// A panic in the key function fails its message, as a panic in the
// handler would; Run goes on.
func TestAPanickingKeyFunctionFailsItsMessageAndRunGoesOn(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishJobs(t, js, 10)

	var hook hookLog
	ta := newTally()
	stop := consuming(t, newPool(t, 2), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	}, natsjs.WithKey(func(msg jetstream.Msg) string {
		if md, _ := msg.Metadata(); string(msg.Data()) == "3" && md.NumDelivered == 1 {
			panic("no key for job 3")
		}
		return string(msg.Data())
	}), natsjs.WithBackoff(func(uint64) time.Duration { return 0 }), hook.option())
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left")
	require.NoError(t, stop())
	requireEachOnce(t, ta, 10)
	hes := hook.handlerErrors()
	require.Len(t, hes, 1)
	var pe *workerpool.PanicError
	require.ErrorAs(t, hes[0], &pe)
	assert.Equal(t, "no key for job 3", pe.Value)
	assert.False(t, hes[0].Final)
}

// A pool stopped under a Run with keys drops the tasks of the messages
// that waited for their key: Run hands the messages back, and the tasks,
// if anyone runs them, do nothing.
func TestAPoolStoppedUnderARunWithKeysEndsItAndHandsBackItsMessages(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, 0)
	publishKeyed(t, js, "k", "k", "k", "k")

	p := workerpool.New(2)
	release := make(chan struct{})
	ta := newTally()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- natsjs.Run(ctx, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
			ta.add(msg)
			<-release
			return nil
		}, natsjs.WithKey(subjectKey))
	}()
	eventually(t, func() bool { return ta.distinct() == 1 && p.Status().Waiting == 3 }, "k.1 to k.3 do not wait for k.0")
	dropped := make(chan []func(), 1)
	go func() { dropped <- p.Stop() }() // waits for the running handler

	tb := newTally()
	stopB := consuming(t, newPool(t, 4), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		tb.add(msg)
		return nil
	})
	eventually(t, func() bool { return tb.distinct() == 3 }, "the dropped messages were not handed back")
	close(release)
	assert.ErrorIs(t, recv(t, ran, "Run"), workerpool.ErrStopped)
	for _, task := range recv(t, dropped, "the pool's Stop") {
		task()
	}
	assert.Equal(t, map[string]int{"k.0": 1}, ta.snapshot())
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stopB())
}
