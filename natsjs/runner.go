package natsjs

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/dispatchkit/workerpool"
)

// Run's tasks on the pool are runners, not messages: a runner, once the
// pool starts it on a worker, runs the queued messages one after another
// until none is left, then gives the worker back. So a steady stream of
// messages costs one hand-off to the pool per turn of a runner, not one
// per message. A runner's turn lasts about a horizon (see flow): once it
// has run messages that long, it submits another runner in its place and
// gives its worker back, so that the pool's other work, its sub-pools and
// other Runs get their turns as they would between tasks. Runners are
// submitted with TrySubmit, which never runs one in the submitter: a pool
// whose bounded queue is full gets it again at the watcher's next poll.

// errGoexit stands for the failure of a handler that called
// runtime.Goexit.
var errGoexit = errors.New("natsjs: the handler called runtime.Goexit")

// submitRunners submits n runners, which the flow counted pending.
func (r *run) submitRunners(n int) {
	for i := range n {
		if err := r.s.TrySubmit(r.runnerTask); err != nil {
			r.flow.unsubmitted(n - i)
			if errors.Is(err, workerpool.ErrStopped) {
				r.end(workerpool.ErrStopped)
			}
			return
		}
	}
}

// runTask is a runner: Run's task on the pool, r.runnerTask.
func (r *run) runTask() {
	rn := newRunner()
	if !r.flow.start(rn) {
		return // the run is stopping or over
	}
	ended := false
	defer func() {
		if !ended {
			// A handler panicked or called runtime.Goexit, after its
			// message was settled: another runner takes over.
			r.submitRunners(r.flow.died(rn))
		}
	}()
	start := time.Now()
	yield := false
	for m := r.next(rn, false); m != nil; m = r.next(rn, yield) {
		now := r.handle(m)
		if now.Sub(start) >= r.flow.horizonNow() && r.othersWait() && r.flow.yieldDue() {
			if err := r.s.TrySubmit(r.runnerTask); err == nil {
				yield = true
			} else {
				// Keep the worker: messages wait and no runner could
				// take over.
				r.flow.unsubmitted(1)
				if errors.Is(err, workerpool.ErrStopped) {
					r.end(workerpool.ErrStopped)
				}
			}
		}
		if !yield && now.Sub(start) >= r.flow.horizonNow() {
			start = now // a new turn
		}
	}
	ended = true
}

// othersWait reports whether other tasks may be waiting for the pool's
// workers, so that a runner that has had its turn should yield: for a
// *workerpool.Pool, whether its queue holds any; for a sub-pool, whose
// pool's queue is not visible, always.
func (r *run) othersWait() bool {
	if p, ok := r.s.(*workerpool.Pool); ok {
		return p.WaitingQueueSize() > 0
	}
	return true
}

// next returns the next message rn runs, or nil once rn must give its
// worker back. A handler that made Run's ctx done, or saw it done, has
// returned before this: no handler starts after it, whether the
// AfterFunc that stops the flow has run yet or not.
func (r *run) next(rn *runner, yield bool) *message {
	if r.stopCtx.Err() != nil {
		r.beginStop()
	}
	m, linger := r.flow.next(rn, yield, monotonic())
	if !linger {
		return m
	}
	horizon := r.flow.horizonNow()
	if rn.timer == nil {
		rn.timer = time.NewTimer(horizon)
	} else {
		rn.timer.Reset(horizon)
	}
	select {
	case m = <-rn.wake: // nil at a stop
		rn.timer.Stop()
		return m
	case <-rn.timer.C:
		if r.flow.unlinger(rn) {
			return nil
		}
		return <-rn.wake // handed to it as the horizon passed
	}
}

// handle runs the handler on m and settles m, and returns when it ended.
// A handler that panics has m settled, then its panic goes on to the pool,
// which counts it and passes it to its panic handler; one that calls
// runtime.Goexit has m settled, then its goroutine ends.
//
// A copy whose handler failed for good before (see final.go) is settled
// without running the handler, and so is a delayed copy's first delivery,
// its wait (snooze.go).
func (r *run) handle(m *message) time.Time {
	if cause, ok := m.finalError(); ok {
		r.finishCopy(m, cause)
		return time.Now()
	}
	if r.wait(m) {
		return time.Now() // a delayed copy's wait
	}
	start := time.Now()
	ctx, cancel := r.handlerContext()
	returned := false
	defer func() {
		if returned {
			return
		}
		v := recover() // nil for runtime.Goexit
		err := errGoexit
		if v != nil {
			err = &workerpool.PanicError{Value: v, Stack: debug.Stack()}
		}
		r.settle(m, err, r.stoppedBy(ctx))
		if cancel != nil {
			cancel()
		}
		if v != nil {
			panic(v)
		}
	}()
	err := r.h(ctx, m)
	returned = true
	r.settle(m, err, r.stoppedBy(ctx))
	if cancel != nil {
		cancel()
	}
	end := time.Now()
	r.flow.sample(end.Sub(start))
	return end
}

// handlerContext returns the ctx of a handler about to start: the
// handlers' ctx, with a deadline if WithHandlerTimeout set one, and then a
// cancel to call once the handler returned (else nil).
func (r *run) handlerContext() (context.Context, context.CancelFunc) {
	if d := r.cfg.handlerTimeout; d > 0 {
		return context.WithTimeout(r.hctx, d)
	}
	return r.hctx, nil
}

// stoppedBy reports whether ctx, a handler's, was cancelled by the stop,
// rather than by its deadline, which then came first: a ctx derived from
// the handlers' says DeadlineExceeded for ever once its deadline passed.
func (r *run) stoppedBy(ctx context.Context) bool {
	return r.hctx.Err() != nil && ctx.Err() != context.DeadlineExceeded
}

// With key order (WithKey), a message is a task of its own, of its key:
// the puller submits the messages in the order they came.

// submitKeyed submits the messages that wait to be, as tasks of their
// keys, until none is left or the pool refuses one: that one is again
// the first to be submitted, at the watcher's next poll.
func (r *run) submitKeyed() {
	for {
		m := r.flow.nextToSubmit()
		if m == nil {
			return
		}
		key, err := r.keyOf(m)
		if !r.flow.submitting(m, key) {
			return // the stop took it
		}
		if err != nil {
			if r.flow.startKeyed(m) {
				r.settle(m, err, false)
			}
			continue
		}
		if err := r.s.SubmitKey(key, func() { r.runKeyed(m) }); err != nil {
			r.flow.unsubmit(m)
			if errors.Is(err, workerpool.ErrStopped) {
				r.end(workerpool.ErrStopped)
			}
			return
		}
	}
}

// keyOf returns m's key, or the failure of the key function, which
// panicked.
func (r *run) keyOf(m *message) (key string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &workerpool.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return r.cfg.key(m), nil
}

// runKeyed is the task of m, a message of a key: it runs m, unless the
// stop took it back, or is under way.
func (r *run) runKeyed(m *message) {
	if r.stopCtx.Err() != nil {
		r.beginStop()
	}
	if r.flow.startKeyed(m) {
		r.handle(m)
	}
}
