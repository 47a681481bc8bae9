package natsjs_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
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

// TestMain runs up to 8 tests at once, unless -test.parallel says: most
// tests wait on the clock (AckWaits, backoffs, reconnections, the last
// pulls of a stop) rather than the CPU, and the default, GOMAXPROCS, would
// run two at a time on a 2-core machine, which makes one run of the
// package take over a minute.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}

// waitFor is how long a test waits for a condition that should hold soon:
// generous, so that a slow machine or the race detector does not fail it.
const waitFor = 30 * time.Second

// startServer starts an embedded nats-server with JetStream on a random
// loopback port, its store in a temporary directory, and shuts it down at
// the end of the test.
func startServer(t testing.TB) *server.Server {
	t.Helper()
	return startServerAt(t, -1, t.TempDir())
}

// startServerAt starts the server on port (-1: a random one) with its
// store in dir.
func startServerAt(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	})
	require.NoError(t, err)
	// What the server says of trouble, for a test whose server does not
	// come up to say why.
	var log serverLog
	s.SetLogger(&log, false, false)
	s.Start()
	t.Cleanup(s.Shutdown)
	require.True(t, s.ReadyForConnections(10*time.Second), "server not ready: %s", log.String())
	return s
}

// A serverLog keeps the warnings and errors of an embedded server.
type serverLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) add(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 100 {
		l.lines = append(l.lines, level+": "+fmt.Sprintf(format, v...))
	}
}

func (l *serverLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "; ")
}

func (l *serverLog) Noticef(string, ...any)         {}
func (l *serverLog) Debugf(string, ...any)          {}
func (l *serverLog) Tracef(string, ...any)          {}
func (l *serverLog) Warnf(format string, v ...any)  { l.add("warning", format, v...) }
func (l *serverLog) Errorf(format string, v ...any) { l.add("error", format, v...) }
func (l *serverLog) Fatalf(format string, v ...any) { l.add("fatal", format, v...) }

// restartablePort returns a free loopback port for a server that a test
// shuts down and starts again on the same port. A port the system gives
// out (-1) is an ephemeral one, which, once the server is down, the
// system may give to any connection of the tests running beside it,
// where the server could not start again; so it is one below the
// ephemeral range (32768 and up on Linux), which only a listener asking
// for it by number takes.
func restartablePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			require.NoError(t, ln.Close())
			return port
		}
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// connect connects to s, reconnecting fast and for ever, and closes the
// connection at the end of the test.
func connect(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(),
		nats.ReconnectWait(50*time.Millisecond),
		nats.MaxReconnects(-1),
	)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// workQueue creates the work-queue stream JOBS on subject jobs.> and its
// durable pull consumer "workers" with explicit acks, ackWait and
// maxDeliver (0: no limit).
func workQueue(t testing.TB, js jetstream.JetStream, ackWait time.Duration, maxDeliver int) jetstream.Consumer {
	t.Helper()
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "JOBS",
		Subjects:  []string{"jobs.>"},
		Retention: jetstream.WorkQueuePolicy,
	})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
		Durable:    "workers",
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    ackWait,
		MaxDeliver: maxDeliver,
	})
	require.NoError(t, err)
	return cons
}

// publishJobs publishes n jobs on jobs.<i>, with payload and Nats-Msg-Id
// the job's number, and waits until the stream has stored them all.
func publishJobs(t testing.TB, js jetstream.JetStream, n int) {
	t.Helper()
	for i := range n {
		id := strconv.Itoa(i)
		_, err := js.PublishMsgAsync(&nats.Msg{
			Subject: "jobs." + id,
			Data:    []byte(id),
			Header:  nats.Header{"Nats-Msg-Id": []string{id}},
		})
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(waitFor):
		t.Fatal("publishing timed out")
	}
}

// streamMsgs returns the number of messages in stream name.
func streamMsgs(t testing.TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

// streamEmpty reports whether stream name holds no message; false if the
// server does not answer, as while the connection is being restored.
func streamEmpty(js jetstream.JetStream, name string) bool {
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		return false
	}
	info, err := st.Info(context.Background())
	return err == nil && info.State.Msgs == 0
}

// consumerInfo returns the consumer's info, fresh from the server.
func consumerInfo(t testing.TB, cons jetstream.Consumer) *jetstream.ConsumerInfo {
	t.Helper()
	info, err := cons.Info(context.Background())
	require.NoError(t, err)
	return info
}

// recv returns what ch delivers, or fails the test if it delivers nothing
// within waitFor: a Run that returned early, or a handler that never
// started, fails the test instead of hanging it.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("%s: nothing within %v", what, waitFor)
		panic("unreachable")
	}
}

// eventually fails the test unless cond holds within waitFor.
func eventually(t testing.TB, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, cond, waitFor, 5*time.Millisecond, msgAndArgs...)
}

// consuming runs Run in a goroutine until the returned stop function is
// called, which cancels its ctx and returns Run's error.
func consuming(t testing.TB, s workerpool.Submitter, js jetstream.JetStream, cons jetstream.Consumer, h natsjs.Handler, opts ...natsjs.Option) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- natsjs.Run(ctx, s, js, cons, h, opts...) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(waitFor):
				err = fmt.Errorf("Run did not return within %v of its ctx being done", waitFor)
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// An eventLog keeps what a test saw happen, with the time since it began,
// for the test to print if it fails: what the error handler was told,
// and the test's own steps.
type eventLog struct {
	start  time.Time
	mu     sync.Mutex
	events []string
}

func newEventLog() *eventLog { return &eventLog{start: time.Now()} }

func (l *eventLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf("%8v ", time.Since(l.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// errorHandler returns an option that adds what Run reports to the log.
func (l *eventLog) errorHandler() natsjs.Option {
	return natsjs.WithErrorHandler(func(err error) { l.add("error handler: %v", err) })
}

// print logs every event in t.
func (l *eventLog) print(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		t.Log(e)
	}
}

// tally counts how often each job was handled.
type tally struct {
	mu    sync.Mutex
	count map[string]int
}

func newTally() *tally { return &tally{count: make(map[string]int)} }

func (ta *tally) add(msg jetstream.Msg) {
	ta.mu.Lock()
	ta.count[string(msg.Data())]++
	ta.mu.Unlock()
}

// distinct returns the number of jobs handled at least once.
func (ta *tally) distinct() int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return len(ta.count)
}

// snapshot returns a copy of the counts.
func (ta *tally) snapshot() map[string]int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	m := make(map[string]int, len(ta.count))
	for k, v := range ta.count {
		m[k] = v
	}
	return m
}

// requireEachOnce checks that jobs 0..n-1 were each handled exactly once.
func requireEachOnce(t testing.TB, ta *tally, n int) {
	t.Helper()
	counts := ta.snapshot()
	assert.Len(t, counts, n)
	for i := range n {
		assert.Equal(t, 1, counts[strconv.Itoa(i)], "job %d", i)
	}
}

// newPool returns a pool of n workers, stopped at the end of the test.
func newPool(t testing.TB, n int, opts ...workerpool.Option) *workerpool.Pool {
	t.Helper()
	p := workerpool.New(n, opts...)
	t.Cleanup(func() { p.Stop() })
	return p
}
