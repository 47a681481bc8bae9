package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

func TestGroupWaitReturnsNilWhenEveryTaskSucceeds(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	g := p.Group(context.Background())
	results := make([]int, 50)
	for i := range results {
		g.Go(func(context.Context) error { results[i] = i + 1; return nil })
	}
	require.NoError(t, g.Wait())
	for i, r := range results {
		assert.Equal(t, i+1, r, "every task ran, and its write happens before Wait returns")
	}
	assert.Zero(t, g.Skipped())
	assert.ErrorIs(t, g.Context().Err(), context.Canceled, "Wait cancels the group's context")
	assert.ErrorIs(t, context.Cause(g.Context()), context.Canceled)
}

func TestGroupFirstErrorCancelsItsContextAndSkipsTasksNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		g := p.Group(context.Background())
		errFirst := errors.New("first")

		var ranToEnd, started atomic.Int64
		// A long task that is running when the group fails: it finishes.
		g.Go(func(ctx context.Context) error {
			started.Add(1)
			<-ctx.Done()
			time.Sleep(time.Second) // finishing up after cancellation
			ranToEnd.Add(1)
			return nil
		})
		g.Go(func(context.Context) error {
			started.Add(1)
			time.Sleep(time.Millisecond)
			return errFirst
		})
		// Ten more wait in the queue behind the two.
		for range 10 {
			g.Go(func(context.Context) error { started.Add(1); return errors.New("not first") })
		}
		synctest.Wait()
		assert.Equal(t, int64(2), started.Load())

		time.Sleep(time.Millisecond) // the second task fails
		synctest.Wait()
		assert.ErrorIs(t, context.Cause(g.Context()), errFirst, "the failure cancels the context at once")

		assert.ErrorIs(t, g.Wait(), errFirst)
		assert.Equal(t, int64(2), started.Load(), "no task started after the failure")
		assert.Equal(t, int64(1), ranToEnd.Load(), "the running task finished")
		assert.Equal(t, 10, g.Skipped())
	})
}

func TestGroupPanicBecomesItsErrorAndCancelsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithPanicHandler(func(*workerpool.PanicError) {
			t.Error("a group task's panic goes to the group, not the handler")
		}))
		defer p.Stop()
		g := p.Group(context.Background())
		g.Go(func(context.Context) error { panic("boom") })
		g.Go(func(context.Context) error { t.Error("ran after the panic"); return nil })
		err := g.Wait()
		var pe *workerpool.PanicError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "boom", pe.Value)
		assert.Equal(t, 1, g.Skipped())
		assert.Equal(t, err, context.Cause(g.Context()))
	})
}

func TestGroupDoneParentContextSkipsTasksNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		defer p.Stop()
		parent, cancel := context.WithCancelCause(context.Background())
		g := p.Group(parent)
		errShutdown := errors.New("shutting down")
		running := make(chan struct{})
		g.Go(func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			return nil // finished cleanly despite the cancellation
		})
		for range 5 {
			g.Go(func(context.Context) error { t.Error("ran after the parent was cancelled"); return nil })
		}
		<-running
		cancel(errShutdown)
		assert.ErrorIs(t, g.Wait(), errShutdown, "skipped tasks did not succeed: the parent's cause")
		assert.Equal(t, 5, g.Skipped())

		// Go on a group whose context is done skips without submitting.
		synctest.Wait() // Status counts the last submission a moment after it returned
		submitted := p.Status().Submitted
		g.Go(func(context.Context) error { t.Error("ran"); return nil })
		assert.Equal(t, 6, g.Skipped())
		assert.Equal(t, submitted, p.Status().Submitted)
	})
}

func TestGroupWaitReportsErrStoppedWhenThePoolIsStoppedUnderIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1)
		g := p.Group(context.Background())
		release := make(chan struct{})
		var ran atomic.Int64
		g.Go(func(context.Context) error { <-release; ran.Add(1); return nil })
		for range 4 {
			g.Go(func(context.Context) error { ran.Add(1); return nil })
		}
		synctest.Wait() // the first task runs, the other four wait
		waited := make(chan error)
		go func() { waited <- g.Wait() }()
		stopped := make(chan struct{})
		go func() { p.Stop(); close(stopped) }()
		synctest.Wait()
		assert.Equal(t, 4, g.Skipped(), "Stop dropped the four queued tasks")
		close(release) // the running one finishes; Wait must not hang
		assert.ErrorIs(t, <-waited, workerpool.ErrStopped)
		<-stopped
		assert.Equal(t, int64(1), ran.Load())
	})
}

// Group with a nil context panics at once with a message that names it.
func TestGroupWithANilContextPanicsNamingIt(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	assert.PanicsWithValue(t, "workerpool: Group: nil context", func() {
		p.Group(nil) //nolint:staticcheck // the nil context is the point
	})
}

func TestGroupGoRecordsWhatThePoolRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool func(t *testing.T) (p *workerpool.Pool, release func())
		fn   func(context.Context) error
		want error
	}{
		{"stopped pool", func(t *testing.T) (*workerpool.Pool, func()) {
			p := workerpool.New(1)
			p.Stop()
			return p, func() {}
		}, func(context.Context) error { return nil }, workerpool.ErrStopped},
		{"full queue under Reject", func(t *testing.T) (*workerpool.Pool, func()) {
			p := workerpool.New(1, workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.Reject))
			release := hold(t, p, 2)
			synctest.Wait()
			return p, release
		}, func(context.Context) error { return nil }, workerpool.ErrQueueFull},
		{"nil func", func(t *testing.T) (*workerpool.Pool, func()) {
			return workerpool.New(1), func() {}
		}, nil, workerpool.ErrNilTask},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, release := tc.pool(t)
				g := p.Group(context.Background())
				g.Go(tc.fn)
				assert.ErrorIs(t, context.Cause(g.Context()), tc.want, "a refusal fails the group at once")
				assert.Equal(t, 1, g.Skipped())
				release()
				assert.ErrorIs(t, g.Wait(), tc.want)
				p.StopWait()
			})
		})
	}
}

func TestGroupGoWaitingForRoomGivesUpWhenTheContextIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1)) // Block
		defer p.Stop()
		release := hold(t, p, 2) // the queue is full
		synctest.Wait()
		parent, cancel := context.WithCancel(context.Background())
		g := p.Group(parent)
		returned := make(chan struct{})
		go func() {
			g.Go(func(context.Context) error { t.Error("ran after the context was done"); return nil })
			close(returned)
		}()
		synctest.Wait()
		assert.False(t, isDone(returned), "Go waits for room, as Submit does")

		cancel()
		<-returned // before the queue has room
		assert.Equal(t, 1, g.Skipped())
		assert.ErrorIs(t, g.Wait(), context.Canceled)
		release()
	})
}

func TestGroupTryGoReturnsFalseWhenThePoolWouldNotAcceptAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1)) // Block: TryGo still does not wait
		g := p.Group(context.Background())
		release := make(chan struct{})
		var ran atomic.Int64
		task := func(context.Context) error { <-release; ran.Add(1); return nil }
		assert.True(t, g.TryGo(task), "to the worker")
		synctest.Wait()
		assert.True(t, g.TryGo(task), "to the queue")
		assert.False(t, g.TryGo(task), "the queue is full")
		assert.False(t, g.TryGo(nil), "nil")
		assert.NoError(t, context.Cause(g.Context()), "a refused TryGo does not fail the group")

		close(release)
		assert.NoError(t, g.Wait())
		assert.Equal(t, int64(2), ran.Load())
		assert.Zero(t, g.Skipped(), "what TryGo refused is not counted")

		p.Stop()
		g = p.Group(context.Background())
		assert.False(t, g.TryGo(task), "a stopped pool")
		assert.NoError(t, g.Wait())
	})
}

func TestGroupsSharingAPoolAreIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		defer p.Stop()
		failing := p.Group(context.Background())
		healthy := p.Group(context.Background())
		var healthyRan atomic.Int64
		// Interleave the two groups' tasks in the one queue.
		for i := range 20 {
			failing.Go(func(context.Context) error {
				time.Sleep(time.Millisecond)
				if i == 3 {
					return io.ErrUnexpectedEOF
				}
				return nil
			})
			healthy.Go(func(ctx context.Context) error {
				time.Sleep(time.Millisecond)
				if ctx.Err() != nil {
					t.Error("the other group's failure cancelled this one")
				}
				healthyRan.Add(1)
				return nil
			})
		}
		assert.ErrorIs(t, failing.Wait(), io.ErrUnexpectedEOF)
		assert.NoError(t, healthy.Wait())
		assert.Equal(t, int64(20), healthyRan.Load())
		assert.Zero(t, healthy.Skipped())
		assert.Positive(t, failing.Skipped())
	})
}

func TestGroupTaskThatCallsGoexitCountsAsSucceeded(t *testing.T) {
	p := workerpool.New(1)
	defer p.Stop()
	g := p.Group(context.Background())
	g.Go(func(context.Context) error { runtime.Goexit(); return io.EOF })
	assert.NoError(t, g.Wait(), "as SubmitWait: Goexit counts as returned")
}

func TestGroupGoAllocatesOneTask(t *testing.T) {
	p := workerpool.New(4)
	defer p.Stop()
	g := p.Group(context.Background())
	fn := func(context.Context) error { return nil }
	assert.Equal(t, 1.0, testing.AllocsPerRun(10000, func() { g.Go(fn) }))
	require.NoError(t, g.Wait())
	// After Wait the context is done: Go skips and allocates nothing.
	assert.Zero(t, testing.AllocsPerRun(100, func() { g.Go(fn) }))
}

func ExamplePool_Group() {
	p := workerpool.New(1) // one worker: the tasks run one after another
	defer p.StopWait()

	// Check three files. The first failure cancels the group's context, so
	// the task that has not started yet is skipped.
	g := p.Group(context.Background())
	for _, name := range []string{"a.txt", "missing.txt", "b.txt"} {
		g.Go(func(ctx context.Context) error {
			if name == "missing.txt" {
				return fmt.Errorf("open %s: %w", name, io.ErrUnexpectedEOF)
			}
			fmt.Println("checked", name)
			return nil
		})
	}
	fmt.Println("first error:", g.Wait())
	fmt.Println("skipped:", g.Skipped())
	// Output:
	// checked a.txt
	// first error: open missing.txt: unexpected EOF
	// skipped: 1
}

func TestGroupLosesNothingWhenStopRacesGo(t *testing.T) {
	for range 20 {
		p := workerpool.New(2, workerpool.WithMaxWaiting(4)) // Block: some Go calls wait
		g := p.Group(context.Background())
		var ran atomic.Int64
		const submitters, each = 4, 50
		var wg sync.WaitGroup
		for range submitters {
			wg.Go(func() {
				for range each {
					g.Go(func(context.Context) error { ran.Add(1); return nil })
				}
			})
		}
		go p.Stop()
		wg.Wait()
		err := g.Wait() // must return
		assert.Equal(t, int64(submitters*each), ran.Load()+int64(g.Skipped()),
			"every task given to Go ran or was counted as skipped")
		if g.Skipped() > 0 {
			assert.ErrorIs(t, err, workerpool.ErrStopped)
		} else {
			assert.NoError(t, err)
		}
		p.Stop()
	}
}

func TestGroupTasksMayGoMoreTasks(t *testing.T) {
	p := workerpool.New(2)
	defer p.Stop()
	g := p.Group(context.Background())
	var ran atomic.Int64
	var spawn func(depth int) func(context.Context) error
	spawn = func(depth int) func(context.Context) error {
		return func(context.Context) error {
			ran.Add(1)
			if depth > 0 {
				g.Go(spawn(depth - 1))
				g.Go(spawn(depth - 1))
			}
			return nil
		}
	}
	g.Go(spawn(5))
	require.NoError(t, g.Wait())
	assert.Equal(t, int64(63), ran.Load())
}

// A4b. Deterministic: a Group.Go waiting for room in a full bounded queue
// (Block) when the group's ctx ends. The task was never accepted, so it
// must not be counted in Canceled ("accepted tasks that never started").
func TestGroupGoBlockedForRoomIsNotCanceled(t *testing.T) {
	// On one P the group's AfterFunc runs before the woken Go goroutine.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, workerpool.WithMaxWaiting(1))
		defer p.Stop()
		block := make(chan struct{})
		p.Submit(func() { <-block })
		p.Submit(func() {}) // fills the queue
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		g := p.Group(ctx)
		went := make(chan struct{})
		go func() {
			defer close(went)
			g.Go(func(context.Context) error { return nil }) // waits for room
		}()
		synctest.Wait()
		cancel()
		<-went
		synctest.Wait()
		close(block)
		g.Wait()
		p.StopWait()
		s := p.Status()
		t.Logf("Skipped=%d; %s", g.Skipped(), fmtStatus(s))
		if !balanced(s) {
			t.Errorf("at rest, not balanced: %s", fmtStatus(s))
		}
	})
}

// A group's context ends, on another goroutine, while Go still feeds it:
// the tasks still queued are given up, by the group as its context ends,
// or by the workers that reach them. Once Wait and then Stop have
// returned, the counts balance at once, in the pool and in the sub-pool
// the group ran on: the group's give-up is counted before Wait returns.
func TestTheCountsBalanceOnceAGroupsWaitAndThePoolsStopReturn(t *testing.T) {
	rounds := 400
	if raceEnabled {
		rounds /= 4
	}
	for _, onSub := range []bool{false, true} {
		t.Run(fmt.Sprint("subpool=", onSub), func(t *testing.T) {
			for round := range rounds {
				p := workerpool.New(2)
				var to grouper = p
				var sub *workerpool.Subpool
				if onSub {
					sub = p.Subpool("s", 2)
					to = sub
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				g := to.Group(ctx)
				for i := range 60 {
					if i == 30 {
						go cancel()
					}
					g.Go(func(context.Context) error { runtime.Gosched(); return nil })
				}
				g.Wait()
				p.Stop()
				ps := p.Status()
				if !balanced(ps) {
					t.Fatalf("round %d: pool %s", round, fmtStatus(ps))
				}
				if sub != nil {
					if ss := sub.Status(); !balanced(ss) || ss.Waiting != 0 || ss.Canceled != ps.Canceled {
						t.Fatalf("round %d: pool %s; sub-pool %s", round, fmtStatus(ps), fmtStatus(ss))
					}
				}
			}
		})
	}
}

// A group's task fails, which cancels the group, while its next task waits
// in the hand-off buffer; the worker that ended the first may take the
// second before the group skips it, and then gives it up itself. Promise:
// once everything is at rest, the pool's counts balance (Submitted =
// Completed + Canceled), in a pool whose loop hears of nothing more: no
// submission comes after. The give-up was once counted only when the loop
// looked at the worker's report, which it does not while nothing waits.
func TestAGroupsTaskGivenUpAsAWorkerTakesItIsCountedAtOnce(t *testing.T) {
	for round := range 50 {
		synctest.Test(t, func(t *testing.T) {
			p := workerpool.New(1)
			defer p.Stop()
			g := p.Group(context.Background())
			release := make(chan struct{})
			g.Go(func(context.Context) error { <-release; return errors.New("fail") })
			g.Go(func(context.Context) error { return nil }) // waits in the buffer
			synctest.Wait()
			close(release)
			synctest.Wait()
			s := p.Status()
			require.Equal(t, s.Submitted, s.Completed+s.Canceled+uint64(s.Waiting)+uint64(s.Busy),
				"round %d: at rest, every task submitted is counted once: %+v", round, s)
			require.Error(t, g.Wait())
		})
	}
}
