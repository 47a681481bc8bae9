package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On the fake clock the counts are exact. ctx ends at 1.005s: 100 jobs
// taken, 8 ran (4 per worker). The grace period ends at 2.005s: each
// worker started 10 jobs by then, and Shutdown waits for them; the other
// 80 are dropped, half of each kind.
func TestRunGivesTheQueuedJobsAGracePeriodThenReportsTheDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 1005*time.Millisecond)
		defer cancel()
		var out bytes.Buffer
		require.NoError(t, run(ctx, &out, time.Second))
		assert.Equal(t, `stopping: 100 jobs taken, 8 ran; the queued ones get 1s
Shutdown returned 40 funcs and context deadline exceeded
20 jobs ran, 80 were dropped (Status().Abandoned):
  40 fire-and-forget jobs came back from Shutdown
  40 waited-for jobs went to their waiters as ErrStopped
`, out.String())
	})
}

// With time to spare, nothing is dropped.
func TestRunDropsNothingWhenTheGracePeriodIsLongEnough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 105*time.Millisecond)
		defer cancel()
		var out bytes.Buffer
		require.NoError(t, run(ctx, &out, time.Minute))
		assert.Contains(t, out.String(), "Shutdown returned 0 funcs and <nil>\n10 jobs ran, 0 were dropped")
	})
}

// A real SIGINT, sent to this process once serve listens for it, stops
// the service gracefully rather than killing the test; what it reports
// adds up.
func TestServeStopsGracefullyOnSIGINT(t *testing.T) {
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	out := &syncWriter{first: make(chan struct{})}
	done := make(chan error)
	start := time.Now()
	go func() { done <- serve(out) }()
	<-out.first // "serving": serve catches SIGINT from here on
	time.Sleep(300 * time.Millisecond)
	if err := self.Signal(os.Interrupt); err != nil {
		t.Skipf("cannot send SIGINT here: %v", err) // Windows
	}
	require.NoError(t, <-done)
	assert.Less(t, time.Since(start), 2500*time.Millisecond, "stopped by the signal, not the 3s timeout")

	text := out.String()
	m := regexp.MustCompile(`stopping: (\d+) jobs taken[^\n]*\n` +
		`Shutdown returned (\d+) funcs and (context deadline exceeded|<nil>)\n` +
		`(\d+) jobs ran, (\d+) were dropped[^\n]*\n` +
		`  (\d+) fire-and-forget[^\n]*\n` +
		`  (\d+) waited-for[^\n]*\n$`).FindStringSubmatch(text)
	require.NotNil(t, m, "output:\n%s", text)
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	taken, returned, ran, dropped, back, told := n(1), n(2), n(4), n(5), n(6), n(7)
	assert.Equal(t, taken, ran+dropped, "every job ran or was dropped:\n%s", text)
	assert.Equal(t, returned, back)
	assert.Equal(t, dropped, back+told, "every dropped job came back or went to its waiter:\n%s", text)
}

// A syncWriter is an io.Writer that the test may read while serve writes;
// first is closed on the first write.
type syncWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() == 0 {
		close(w.first)
	}
	return w.buf.Write(b)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
