package workerpool_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// Helpers the tests of several files share. Each is here once.

// ---------------------------------------------------------------------------
// Status.

// balanced reports whether s balances as the docs promise at rest.
func balanced(s workerpool.Status) bool {
	return s.Submitted == s.Completed+s.Abandoned+s.Canceled+uint64(s.Waiting)+uint64(s.Busy)
}

// assertBalanced asserts that s balances (see balanced) and that
// Idle == Workers - Busy.
func assertBalanced(t *testing.T, s workerpool.Status) {
	t.Helper()
	assert.True(t, balanced(s), "Submitted == Completed + Abandoned + Canceled + Waiting + Busy; got %+v", s)
	assert.Equal(t, s.Workers-s.Busy, s.Idle, "Idle == Workers - Busy")
}

// fmtStatus says what balanced checks, and the peaks.
func fmtStatus(s workerpool.Status) string {
	return fmt.Sprintf("Submitted=%d Completed=%d Abandoned=%d Canceled=%d Waiting=%d Busy=%d (rhs=%d) PeakWaiting=%d Workers=%d",
		s.Submitted, s.Completed, s.Abandoned, s.Canceled, s.Waiting, s.Busy,
		s.Completed+s.Abandoned+s.Canceled+uint64(s.Waiting)+uint64(s.Busy), s.PeakWaiting, s.Workers)
}

// pick keeps the worker counts of a Status, for comparing them at once.
func pick(s workerpool.Status) workerpool.Status {
	return workerpool.Status{Workers: s.Workers, Busy: s.Busy, Idle: s.Idle}
}

// ---------------------------------------------------------------------------
// Holding workers, recording the order of starts, counting what runs at
// once.

// hold submits n tasks to p that block until the returned func is called,
// so that later submissions wait in the queue.
func hold(t *testing.T, p *workerpool.Pool, n int) (release func()) {
	t.Helper()
	ch := make(chan struct{})
	for range n {
		require.NoError(t, p.Submit(func() { <-ch }))
	}
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// starts records the order in which tasks start, by name.
type starts struct {
	mu    sync.Mutex
	names []string
}

func (s *starts) task(name string) func() {
	return func() { s.mu.Lock(); s.names = append(s.names, name); s.mu.Unlock() }
}

func (s *starts) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

// peakCounter counts tasks running at once and remembers the most.
type peakCounter struct{ now, peak atomic.Int64 }

func (c *peakCounter) enter() {
	n := c.now.Add(1)
	for old := c.peak.Load(); n > old && !c.peak.CompareAndSwap(old, n); old = c.peak.Load() {
	}
}

func (c *peakCounter) leave() { c.now.Add(-1) }

// index returns the position of s in ss, or -1.
func index(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// atkNoErr fails the test at once if err is not nil.
func atkNoErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------------------
// Waiting, and looking for goroutines left behind.

// isDone reports whether c is closed, without waiting.
func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waitOrTimeout waits for ch, or for d of (fake or real) time; it reports
// whether ch was closed in time.
func waitOrTimeout(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// goroutineStacks returns the stack of every goroutine, the caller's first.
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// bubbleOf returns the synctest bubble of the goroutine whose stack is g,
// and whether it is in one.
func bubbleOf(g string) (bubble string, ok bool) {
	header, _, _ := strings.Cut(g, "\n") // "goroutine N [running, synctest bubble B]:"
	_, bubble, ok = strings.Cut(header, "synctest bubble ")
	return bubble, ok
}

// bubbleGoroutines returns the stacks of the goroutines in the calling
// goroutine's synctest bubble, other than the caller and synctest's own.
func bubbleGoroutines() []string {
	stacks := goroutineStacks()
	bubble, ok := bubbleOf(stacks[0])
	if !ok {
		return nil
	}
	var left []string
	for _, g := range stacks[1:] {
		if b, ok := bubbleOf(g); ok && b == bubble &&
			!strings.Contains(g, "internal/synctest.Run(") &&
			!strings.Contains(g, "testing/synctest.testingSynctestTest(") {
			left = append(left, g)
		}
	}
	return left
}

// poolGoroutines returns the stacks of the goroutines running the pool's
// code (not the test's). In a synctest bubble, it looks only at the
// caller's bubble. Outside one, it leaves out the goroutines whose ids are
// in before (from poolGoroutineIDs): those of pools that earlier tests left
// stuck.
func poolGoroutines(before ...map[string]bool) []string {
	stacks := goroutineStacks()
	bubble, inBubble := bubbleOf(stacks[0])
	var out []string
	for _, g := range stacks[1:] {
		if b, ok := bubbleOf(g); inBubble && (!ok || b != bubble) {
			continue
		}
		if id, _, _ := strings.Cut(g, " ["); len(before) > 0 && before[0][id] {
			continue
		}
		for _, code := range []string{"created by github.com/dispatchkit/workerpool.", "workerpool.(*state).runWorker", "workerpool.(*loop).run", "workerpool.(*state).reapClock"} {
			if strings.Contains(g, code) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// poolGoroutineIDs returns the ids of the goroutines running the pool's
// code now.
func poolGoroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range poolGoroutines() {
		id, _, _ := strings.Cut(g, " [")
		ids[id] = true
	}
	return ids
}

// ---------------------------------------------------------------------------
// Misuse.

// nilSubmitters are the nil Submitters a careless caller can pass: a nil
// interface, and a nil *Pool or *Subpool in one.
var nilSubmitters = []struct {
	name string
	s    workerpool.Submitter
}{
	{"nil interface", nil},
	{"nil *Pool", (*workerpool.Pool)(nil)},
	{"nil *Subpool", (*workerpool.Subpool)(nil)},
}

// A nilArgCase is a call of fn with a nil context or a nil Submitter, and
// the panic it must raise.
type nilArgCase struct {
	name, want string
	ctx        context.Context
	s          workerpool.Submitter
}

// nilArgCases returns the calls of the function named fn with a nil
// context (and a good Submitter, p) and with each nil Submitter.
func nilArgCases(fn string, p workerpool.Submitter) []nilArgCase {
	cases := []nilArgCase{{"nil context", "workerpool: " + fn + ": nil context", nil, p}}
	for _, ns := range nilSubmitters {
		cases = append(cases, nilArgCase{ns.name, "workerpool: " + fn + ": nil Submitter", context.Background(), ns.s})
	}
	return cases
}

// ---------------------------------------------------------------------------
// Rounds.

// longRuns is whether the long runs are on: stress tests at their full number
// of rounds, soaks, and the memory tests at a million tasks. The default go
// test stays short for a newcomer's first run; .ci/run sets
// WORKERPOOL_FULL=1.
var longRuns = os.Getenv("WORKERPOOL_FULL") != ""

// rounds returns n when the long runs are on and the race detector is off,
// and an eighth of it (at least 1) otherwise: a stress test's rounds, so that
// the default run is short and one run under -race stays short enough for
// -count=20 within go test's ten minutes. Many counts make up the rounds.
func rounds(n int) int {
	if !longRuns || raceEnabled {
		return max(1, n/8)
	}
	return n
}

// spinning runs n goroutines that each call f without pause until the
// returned func is called, which waits for them to return.
func spinning(n int, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				f()
			}
		})
	}
	return func() { close(done); wg.Wait() }
}
