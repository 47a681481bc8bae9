package workerpool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// A conn is a stand-in for a per-worker resource: it knows whether a task
// holds it, and whether it was closed, and the tests count the live ones.
type conn struct {
	id     int
	inUse  atomic.Bool
	closed atomic.Int32
}

type conns struct {
	mu          sync.Mutex
	opened      int
	live        map[*conn]bool
	closedTwice atomic.Int32
	failNext    atomic.Bool
}

func newConns() *conns { return &conns{live: map[*conn]bool{}} }

func (c *conns) local() *workerpool.Local[*conn] {
	return workerpool.NewLocal(func() (*conn, error) {
		if c.failNext.CompareAndSwap(true, false) {
			return nil, errors.New("dial failed")
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.opened++
		x := &conn{id: c.opened}
		c.live[x] = true
		return x, nil
	}, func(x *conn) {
		if x.closed.Add(1) > 1 {
			c.closedTwice.Add(1)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.live, x)
	})
}

func (c *conns) counts() (opened, live int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened, len(c.live)
}

// use is a task body: it holds x for d, and fails the test if another task
// holds x at the same time.
func use(t *testing.T, x *conn, d time.Duration) {
	if !x.inUse.CompareAndSwap(false, true) {
		t.Errorf("conn %d handed to two tasks at once", x.id)
		return
	}
	time.Sleep(d)
	x.inUse.Store(false)
}

// Each worker makes its state once, before its first task that needs it,
// and the live states follow the workers down as idle ones are reaped;
// MinWorkers keep theirs.
func TestLocalStatesFollowTheWorkersDownWhenTheyAreReaped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(8, workerpool.WithMinWorkers(2), workerpool.WithIdleTimeout(time.Second))
		c := newConns()
		local := c.local()
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				_, err := workerpool.CallWith(context.Background(), p, local, func(_ context.Context, x *conn) (int, error) {
					use(t, x, 10*time.Millisecond)
					return x.id, nil
				})
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		synctest.Wait()
		opened, live := c.counts()
		assert.Equal(t, 8, p.Status().Workers)
		assert.Equal(t, 8, opened, "one state per worker, made once")
		assert.Equal(t, 8, live)

		time.Sleep(3 * time.Second) // past two idle timeouts
		synctest.Wait()
		_, live = c.counts()
		assert.Equal(t, 2, p.Status().Workers, "reaped down to MinWorkers")
		assert.Equal(t, 2, live, "the reaped workers closed their states")

		p.StopWait()
		opened, live = c.counts()
		assert.Zero(t, live, "every state closed once the pool stopped")
		assert.Equal(t, 8, opened)
		assert.Zero(t, c.closedTwice.Load())
	})
}

// States are closed exactly once each, whatever ends their workers: Resize
// down, a panicking task (whose worker goes on, with its state), Stop with
// busy workers, StopWait and Shutdown.
func TestLocalStatesAreClosedExactlyOnceWhateverEndsTheirWorkers(t *testing.T) {
	for _, stop := range []struct {
		name string
		do   func(*workerpool.Pool)
	}{
		{"Stop", func(p *workerpool.Pool) { p.Stop() }},
		{"StopWait", (*workerpool.Pool).StopWait},
		{"Shutdown", func(p *workerpool.Pool) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			_, _ = p.Shutdown(ctx)
		}},
	} {
		t.Run(stop.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := workerpool.New(4, workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
				c := newConns()
				local := c.local()
				for i := range 40 {
					require.NoError(t, local.Submit(p, func(x *conn) {
						use(t, x, time.Second)
						if i%7 == 0 {
							panic("a task panics; its worker keeps its state")
						}
					}))
				}
				time.Sleep(1500 * time.Millisecond)
				p.Resize(2) // two busy workers become surplus
				time.Sleep(time.Second)
				synctest.Wait()
				_, live := c.counts()
				assert.Equal(t, 2, live, "the surplus workers closed theirs as they left")
				stop.do(p) // with busy workers
				opened, live := c.counts()
				assert.Zero(t, live)
				assert.Equal(t, 4, opened, "a panic does not make a worker open another")
				assert.Zero(t, c.closedTwice.Load(), "closed exactly once")
			})
		})
	}
}

// A task that holds its worker's state while the pool shrinks keeps it
// until it ends: the state is closed after the task, not under it.
func TestATaskHoldsItsStateWhileThePoolShrinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithIdleTimeout(-1))
		defer p.StopWait()
		c := newConns()
		local := c.local()
		release := make(chan struct{})
		var closedUnderTask atomic.Bool
		for range 2 {
			require.NoError(t, local.Submit(p, func(x *conn) {
				<-release
				if x.closed.Load() > 0 {
					closedUnderTask.Store(true)
				}
			}))
		}
		synctest.Wait()
		p.Resize(1)
		synctest.Wait()
		_, live := c.counts()
		assert.Equal(t, 2, live, "both tasks still hold their states")
		close(release)
		synctest.Wait()
		_, live = c.counts()
		assert.Equal(t, 1, live, "the surplus worker closed its state after its task")
		assert.Equal(t, 1, p.Status().Workers, "and left, though nothing else happened")
		assert.False(t, closedUnderTask.Load())
	})
}

// When open fails, a CallWith gets the error and a Submit's task goes to
// the panic handler; the task does not run, and the pool goes on: the next
// task that needs the state opens it again.
func TestAFailedOpenIsReportedAndThePoolGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var handled []*workerpool.PanicError
		p := workerpool.New(1, workerpool.WithPanicHandler(func(pe *workerpool.PanicError) { handled = append(handled, pe) }))
		defer p.StopWait()
		c := newConns()
		local := c.local()

		c.failNext.Store(true)
		_, err := workerpool.CallWith(context.Background(), p, local, func(context.Context, *conn) (int, error) {
			t.Error("ran without its state")
			return 0, nil
		})
		assert.EqualError(t, err, "dial failed")

		c.failNext.Store(true)
		require.NoError(t, local.Submit(p, func(*conn) { t.Error("ran without its state") }))
		synctest.Wait()
		require.Len(t, handled, 1)
		assert.EqualError(t, handled[0].Unwrap(), "dial failed")

		n, err := workerpool.CallWith(context.Background(), p, local, func(_ context.Context, x *conn) (int, error) { return x.id, nil })
		assert.NoError(t, err)
		assert.Equal(t, 1, n)
		s := p.Status()
		assert.Equal(t, uint64(3), s.Completed)
		assert.Zero(t, s.Panicked, "a failed open is not a panic")
	})
}

// A pool that never asks for a state never makes one, and Submit is
// unchanged (see BenchmarkSubmit for the cost).
func TestALocalNobodyAsksForIsNeverOpened(t *testing.T) {
	c := newConns()
	_ = c.local()
	p := workerpool.New(2)
	for range 10 {
		require.NoError(t, p.Submit(func() {}))
	}
	p.StopWait()
	opened, _ := c.counts()
	assert.Zero(t, opened)
}

// Example_local gives each worker a scratch buffer of its own: made the
// first time the worker needs it, reused by each of its tasks, closed when
// the worker exits.
func Example_local() {
	var opened, closed atomic.Int32
	scratch := workerpool.NewLocal(func() (*bytes.Buffer, error) {
		opened.Add(1)
		return new(bytes.Buffer), nil
	}, func(*bytes.Buffer) { closed.Add(1) })

	p := workerpool.New(1)
	for i := range 100 {
		_, _ = workerpool.CallWith(context.Background(), p, scratch, func(_ context.Context, b *bytes.Buffer) (int, error) {
			b.Reset()
			fmt.Fprintf(b, "item %d", i)
			return b.Len(), nil
		})
	}
	p.StopWait()
	fmt.Println("buffers opened:", opened.Load(), "closed:", closed.Load())
	// Output: buffers opened: 1 closed: 1
}
