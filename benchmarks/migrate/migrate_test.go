package migrate

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
)

const (
	// hangsFor is how long a test waits before it calls a wait hung.
	hangsFor = 200 * time.Millisecond
	// generous is how long a wait that must return may take before the
	// test fails, rather than hangs.
	generous = 5 * time.Second
)

// start calls f on a goroutine of its own and returns a channel closed
// when f returns.
func start(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

// returnsWithin reports whether done is closed within d.
func returnsWithin(done <-chan struct{}, d time.Duration) bool {
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// ---------------------------------------------------------------------------
// The event bus: one gammazero pool per subscriber.

// A busResult is what a run of an event bus gave: the events each
// subscriber handled, in order, and the deliveries refused after Close.
type busResult struct {
	Handled [][]Event
	Refused int
}

var busTopics = []string{"a", "a", "b"} // the topic of each subscriber

// runBus subscribes three handlers on two topics, publishes 200 events,
// closes the bus, publishes three more and waits.
func runBus(t *testing.T, subscribe func(string, func(Event)), publish func(Event) int, closeBus, wait func()) busResult {
	t.Helper()
	var mu sync.Mutex
	r := busResult{Handled: make([][]Event, len(busTopics))}
	for i, topic := range busTopics {
		subscribe(topic, func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			r.Handled[i] = append(r.Handled[i], e)
		})
	}
	for n := range 200 {
		r.Refused += publish(Event{Topic: []string{"a", "b"}[n%2], N: n})
	}
	closeBus()
	for n := 200; n < 203; n++ {
		r.Refused += publish(Event{Topic: []string{"a", "b"}[n%2], N: n})
	}
	if !returnsWithin(start(wait), generous) {
		t.Fatalf("Wait did not return within %v", generous)
	}
	mu.Lock()
	defer mu.Unlock()
	return r
}

// wantBus is what runBus must give: each subscriber every event of its
// topic published before Close, in order; every later delivery refused.
func wantBus() busResult {
	want := busResult{Handled: make([][]Event, len(busTopics))}
	for n := range 203 {
		topic := []string{"a", "b"}[n%2]
		for i, t := range busTopics {
			switch {
			case t != topic:
			case n < 200:
				want.Handled[i] = append(want.Handled[i], Event{Topic: topic, N: n})
			default:
				want.Refused++
			}
		}
	}
	return want
}

func TestEventBusMigratedFromGammazeroGivesTheSameResult(t *testing.T) {
	gz := newGzBus()
	before := runBus(t, gz.Subscribe, gz.Publish, gz.Close, gz.Wait)
	b := newBus()
	after := runBus(t, b.Subscribe, b.Publish, b.Close, b.Wait)
	if want := wantBus(); !reflect.DeepEqual(before, want) {
		t.Errorf("on gammazero: %+v\nwant %+v", before, want)
	}
	if !reflect.DeepEqual(after, before) {
		t.Errorf("migrated: %+v\non gammazero: %+v", after, before)
	}
}

// Code that recovered gammazero's panic on a stopped pool still compiles,
// but Submit now returns ErrStopped instead: kept as it was, it drops the
// error, the task never runs, and a wait for it hangs. Returning Submit's
// error fixes it.
func TestRecoveringGammazerosPanicHangsTheWaitAndReturningSubmitsErrorFixesIt(t *testing.T) {
	b := newBus()
	var handled atomic.Int32
	b.Subscribe("a", func(Event) { handled.Add(1) })
	b.Close()

	b.asBefore = true
	if refused := b.Publish(Event{Topic: "a"}); refused != 0 {
		t.Fatalf("the recovering deliver reported %d refusals; it drops ErrStopped", refused)
	}
	waited := start(b.Wait)
	if returnsWithin(waited, hangsFor) {
		t.Fatal("Wait returned, though the event it waits for was dropped")
	}
	b.pending.Done() // the dropped event is what Wait waits for
	if !returnsWithin(waited, generous) {
		t.Fatal("Wait still hangs once the dropped event is counted")
	}

	b.asBefore = false
	if refused := b.Publish(Event{Topic: "a"}); refused != 1 {
		t.Errorf("deliver returning Submit's error: %d refusals, want 1", refused)
	}
	if !returnsWithin(start(b.Wait), generous) {
		t.Fatalf("Wait did not return within %v", generous)
	}
	if n := handled.Load(); n != 0 {
		t.Errorf("a closed subscriber handled %d events", n)
	}
}

// ---------------------------------------------------------------------------
// The wrapper that embeds a gammazero pool to collect results.

func TestCollectorMigratedFromGammazeroGivesTheSameResult(t *testing.T) {
	square := func(n int) func() int { return func() int { return n * n } }
	var want []int
	for n := range 100 {
		want = append(want, n*n)
	}

	gz := newGzCollector[int](4)
	for n := range 100 {
		gz.Go(square(n))
	}
	before := slices.Sorted(slices.Values(gz.Results()))
	c := newCollector[int](4)
	for n := range 100 {
		if err := c.Go(square(n)); err != nil {
			t.Fatalf("Go(%d): %v", n, err)
		}
	}
	after := slices.Sorted(slices.Values(c.Results()))
	if !slices.Equal(before, want) {
		t.Errorf("on gammazero: %v\nwant %v", before, want)
	}
	if !slices.Equal(after, before) {
		t.Errorf("migrated: %v\non gammazero: %v", after, before)
	}

	// Once Results has stopped the pool, gammazero's Go panics; the
	// migrated Go returns ErrStopped, and the embedded field is Pool.
	panicked := func() (panicked bool) {
		defer func() { panicked = recover() != nil }()
		gz.Go(square(0))
		return false
	}()
	if !panicked {
		t.Error("gammazero's Submit on a stopped pool did not panic")
	}
	if err := c.Go(square(0)); !errors.Is(err, workerpool.ErrStopped) {
		t.Errorf("migrated Go after Results: %v, want ErrStopped", err)
	}
	if !c.Pool.Stopped() {
		t.Error("the embedded Pool is not stopped after Results")
	}
}

// ---------------------------------------------------------------------------
// The priority queue of requests in front of an ants pool.

// requestPriority is the priority of request i of runRequests: mixed, with
// ties.
func requestPriority(i int) int { return i * 7 % 5 }

// runRequests queues 20 requests of mixed priorities, starts the pump of a
// one-worker pool, closes it, and returns the order the requests ran in.
func runRequests(t *testing.T, do func(int, func()), startPump, closeRequests func()) []int {
	t.Helper()
	var mu sync.Mutex
	var ran []int
	for i := range 20 {
		do(requestPriority(i), func() {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, i)
		})
	}
	startPump()
	if !returnsWithin(start(closeRequests), generous) {
		t.Fatalf("Close did not return within %v", generous)
	}
	mu.Lock()
	defer mu.Unlock()
	return ran
}

func TestRequestsMigratedFromAntsGiveTheSameResult(t *testing.T) {
	ar, err := newAntsRequests(1)
	if err != nil {
		t.Fatal(err)
	}
	before := runRequests(t, ar.Do, ar.Start, ar.Close)
	r := newRequests(1, (*workerpool.Pool).StopWait)
	after := runRequests(t, r.Do, r.Start, r.Close)

	want := make([]int, 20) // highest priority first, then in arrival order
	for i := range want {
		want[i] = i
	}
	slices.SortStableFunc(want, func(a, b int) int { return cmp.Compare(requestPriority(b), requestPriority(a)) })
	if !slices.Equal(before, want) {
		t.Errorf("on ants: ran %v\nwant %v", before, want)
	}
	if !slices.Equal(after, before) {
		t.Errorf("migrated: ran %v\non ants: %v", after, before)
	}
}

// queueRequests pauses r's pool, which stands for its workers being busy
// with earlier requests, queues n requests that count their runs in ran,
// and starts the pump, which hands them all to the pool: it holds them,
// accepted and not started, when Close stops it. Every stop ends the
// pause.
func queueRequests(r *requests, n int, ran *atomic.Int32) {
	r.pool.Pause(context.Background())
	for i := range n {
		r.Do(i, func() { ran.Add(1) })
	}
	r.Start()
}

// ants has no queue: Release never drops a task its Submit took. Stop
// drops the accepted tasks not yet started, so a WaitGroup that counts
// them waits for ever: Close hangs until what Stop returned is run.
func TestStopInPlaceOfAntsReleaseHangsAWaitGroupThatCountsTasks(t *testing.T) {
	const n = 10
	dropped := make(chan []func(), 1)
	// Stop in place of Release; the program would drop what it returns,
	// the test keeps it to end the hang.
	r := newRequests(1, func(p *workerpool.Pool) { dropped <- p.Stop() })
	var ran atomic.Int32
	queueRequests(r, n, &ran)
	closed := start(r.Close)
	if returnsWithin(closed, hangsFor) {
		t.Fatal("Close returned, though Stop dropped the requests it waits for")
	}
	var tasks []func()
	select {
	case tasks = <-dropped:
	case <-time.After(generous):
		t.Fatalf("Stop did not return within %v", generous)
	}
	if len(tasks) != n || ran.Load() != 0 {
		t.Fatalf("Stop dropped %d requests and %d ran; want %d dropped, none run", len(tasks), ran.Load(), n)
	}
	for _, f := range tasks {
		f()
	}
	if !returnsWithin(closed, generous) {
		t.Fatal("Close still hangs once the dropped requests ran")
	}
}

// What Close wants in place of Release: StopWait, Shutdown (running what a
// deadline dropped), or Stop and running what it returns. Each lets the
// WaitGroup's wait end, with every request run.
func TestStopWaitShutdownOrRunningWhatStopReturnsEndTheWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*workerpool.Pool)
	}{
		{"StopWait", (*workerpool.Pool).StopWait},
		{"Shutdown", func(p *workerpool.Pool) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			left, _ := p.Shutdown(ctx)
			for _, f := range left {
				f()
			}
		}},
		{"run what Stop returns", func(p *workerpool.Pool) {
			for _, f := range p.Stop() {
				f()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 10
			r := newRequests(1, tc.stop)
			var ran atomic.Int32
			queueRequests(r, n, &ran)
			if !returnsWithin(start(r.Close), generous) {
				t.Fatalf("Close did not return within %v", generous)
			}
			if got := ran.Load(); got != n {
				t.Errorf("%d requests ran, want %d", got, n)
			}
		})
	}
}
