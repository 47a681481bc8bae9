package natsjs_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestARunnerYieldsItsWorkerToTheRestOfThePoolAfterItsTurn(t *testing.T) {
	t.Parallel()
	const jobs = 500 // half a second of work on one worker
	cases := []struct {
		name string
		// run returns where Run submits, and where the other task goes.
		run func(p *workerpool.Pool) (workerpool.Submitter, workerpool.Submitter)
	}{
		{"pool", func(p *workerpool.Pool) (workerpool.Submitter, workerpool.Submitter) { return p, p }},
		{"sub-pools", func(p *workerpool.Pool) (workerpool.Submitter, workerpool.Submitter) {
			return p.Subpool("jobs", 1), p.Subpool("other", 1)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			_, js := connect(t, s)
			cons := workQueue(t, js, 30*time.Second, 0)
			publishJobs(t, js, jobs)

			// One worker, which Run's runners keep busy with 1ms jobs.
			p := newPool(t, 1)
			runOn, other := tc.run(p)
			ta := newTally()
			stop := consuming(t, runOn, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				time.Sleep(time.Millisecond)
				ta.add(msg)
				return nil
			})
			eventually(t, func() bool { return ta.distinct() >= 50 }, "Run handled nothing")
			ran := make(chan int, 1)
			require.NoError(t, other.Submit(func() { ran <- ta.distinct() }))
			select {
			case n := <-ran:
				// It ran between Run's turns, long before the queue drained.
				assert.Less(t, n, jobs/2, "the task waited for Run's jobs")
			case <-time.After(waitFor):
				t.Fatal("the pool's other task never ran")
			}
			require.NoError(t, stop())
		})
	}
}

func TestAHandlerThatCallsGoexitFailsUnderEveryOverflowPolicyAndRunGoesOn(t *testing.T) {
	t.Parallel()
	const jobs = 40
	policies := []struct {
		name string
		opts []workerpool.Option
	}{
		{"unbounded queue", nil},
		{"Block", []workerpool.Option{workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.Block)}},
		{"Reject", []workerpool.Option{workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.Reject)}},
		// v1 handled 0 of 40 jobs in 20s here: the feeder ran the
		// handler itself, and Goexit ended the feeder.
		{"CallerRuns", []workerpool.Option{workerpool.WithMaxWaiting(1), workerpool.WithOverflow(workerpool.CallerRuns)}},
	}
	for _, tc := range policies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // waits on backoffs, not the CPU
			s := startServer(t)
			_, js := connect(t, s)
			cons := workQueue(t, js, 30*time.Second, 0)
			publishJobs(t, js, jobs)

			done := newTally() // jobs whose handler returned nil
			var goexits atomic.Int32
			stop := consuming(t, newPool(t, 1, tc.opts...), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
				md, err := msg.Metadata()
				require.NoError(t, err)
				if md.NumDelivered == 1 {
					goexits.Add(1)
					runtime.Goexit() // as t.FailNow would in a handler
				}
				done.add(msg)
				return nil
			}, natsjs.WithMaxInFlight(8), natsjs.WithBackoff(func(uint64) time.Duration { return 0 }))

			eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
			require.NoError(t, stop())
			requireEachOnce(t, done, jobs)
			assert.Equal(t, int32(jobs), goexits.Load(), "a first delivery did not reach the handler")
		})
	}
}

// WithHandlerTimeout bounds each handler, as river and asynq bound a job:
// a handler past its deadline has failed an attempt, not been stopped.
func TestAHandlerPastItsDeadlineHasUsedAnAttempt(t *testing.T) {
	t.Parallel()
	const timeout, maxDeliver = 200 * time.Millisecond, 2
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 30*time.Second, maxDeliver)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	require.NoError(t, err)
	publishJobs(t, js, 1)

	var ran atomic.Int32
	var hook hookLog
	stop := consuming(t, newPool(t, 1), js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		ran.Add(1)
		start := time.Now()
		deadline, ok := ctx.Deadline()
		assert.True(t, ok, "the handler's ctx has no deadline")
		assert.WithinDuration(t, start.Add(timeout), deadline, timeout/2)
		<-ctx.Done()
		assert.GreaterOrEqual(t, time.Since(start), timeout/2)
		return ctx.Err()
	}, natsjs.WithHandlerTimeout(timeout), natsjs.WithBackoff(func(uint64) time.Duration { return 0 }),
		natsjs.WithDeadLetter(js, "dead.jobs"), hook.option())
	eventually(t, func() bool { return streamMsgs(t, js, "DEAD") == 1 && streamEmpty(js, "JOBS") },
		"the job past its deadline on every attempt was not dead-lettered")
	require.NoError(t, stop())
	assert.Equal(t, int32(maxDeliver), ran.Load())
	hes := hook.handlerErrors()
	require.Len(t, hes, maxDeliver)
	for i, he := range hes {
		assert.ErrorIs(t, he, context.DeadlineExceeded)
		assert.False(t, he.Stopped, "%v", he)
		assert.Equal(t, uint64(i+1), he.Delivery)
		assert.Equal(t, i+1 == maxDeliver, he.Final, "%v", he)
	}
}
