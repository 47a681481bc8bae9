package workerpool

import (
	"context"
	"fmt"
)

// Pause stops handing out tasks until ctx is done, and returns once every
// task handed out before it has finished (or ctx is done first). Tasks
// submitted meanwhile wait in the queue; a bounded queue fills up as usual.
//
// A second Pause waits until the first ends, then pauses in turn. Stop,
// StopWait and Shutdown end every pause; Pause on a stopping pool returns
// at once. A ctx that is never done pauses the pool until it is stopped.
//
// Pause panics if ctx is nil.
func (p *Pool) Pause(ctx context.Context) {
	mustContext("Pause", ctx)
	r := &request{kind: pauseRequest, ctx: ctx, done: make(chan struct{})}
	if !p.s.sendRequest(r, p.s.stopping, ctx.Done()) {
		return
	}
	select {
	case <-r.done:
	case <-ctx.Done():
	}
}

// Resize sets the maximum number of workers to n and returns once the pool
// applies it. Raising it starts workers for waiting tasks; lowering it makes
// idle workers above n exit at once and busy ones as their task ends. Once
// the pool has run or dropped every task it accepted and is only waiting
// for running tasks to end, Resize does nothing.
//
// Resize panics if n < 1 or n is below the pool's MinWorkers.
func (p *Pool) Resize(n int) {
	if n < 1 || n < p.s.cfg.minWorkers {
		panic(fmt.Sprintf("workerpool: Resize(%d): the maximum must be at least 1 and at least MinWorkers (%d)", n, p.s.cfg.minWorkers))
	}
	r := &request{kind: resizeRequest, n: n, done: make(chan struct{})}
	if p.s.request(r) {
		<-r.done
	}
}

// Size returns the current maximum number of workers: Status().MaxWorkers.
// It keeps gammazero/workerpool's name, as do WaitingQueueSize and Stopped,
// so that code written for it reads the same here.
func (p *Pool) Size() int { return int(p.s.stats.maxWorkers.Load()) }

// WaitingQueueSize returns the number of tasks waiting for a worker:
// Status().Waiting, without the rest of the snapshot.
func (p *Pool) WaitingQueueSize() int {
	inHand := p.s.stats.inHand.Load()
	return p.s.waiting(inHand, p.s.workersAndTasks())
}

// Stopped reports whether Stop, StopWait or Shutdown has been called. A
// submission racing that call may still be accepted, and then runs or is
// handed back by the stop, as any accepted task; once the call has
// returned, every submission fails with [ErrStopped]. Its tasks may still
// be running: [Pool.Status]'s State is Stopping until every one has ended
// and every goroutine has exited, and Stopped then.
func (p *Pool) Stopped() bool {
	s := p.s
	if s.stopCalled.Load() || s.drainCalled.Load() {
		return true
	}
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}
