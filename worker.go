package workerpool

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// A PanicError is a task's panic, recovered by the pool. [Pool.SubmitWait]
// returns it; fire-and-forget tasks hand it to the panic handler (see
// [WithPanicHandler]).
type PanicError struct {
	// Value is what the task passed to panic.
	Value any
	// Stack is the panicking goroutine's stack trace, as [debug.Stack]
	// formats it.
	Stack []byte
}

// Error returns "workerpool: task panicked: " followed by the panic value.
func (e *PanicError) Error() string {
	return fmt.Sprintf("workerpool: task panicked: %v", e.Value)
}

// Unwrap returns the panic value if it is an error, so that [errors.Is] and
// [errors.As] reach it, and nil otherwise.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// A job is what travels from a submitter through the dispatcher to a
// worker: a fire-and-forget func, or a waiter. Exactly one of fn and w is
// set, or, on p.tasks only, c, a request to the dispatcher.
type job struct {
	fn func()
	w  waiter
	c  *control
	// queued says the dispatcher offered the job from its queue, so it
	// may have more to offer.
	queued bool
}

// A waiter is a task whose submitter learns what became of it: the task of
// a SubmitWait, a Future or a Group. The pool calls finish exactly once:
// after do returned, panicked or called runtime.Goexit (with nil or the
// *PanicError), or with ErrStopped when Stop dropped the task before it
// started. finish may run on a worker, on the dispatcher (for a dropped
// task) or on the submitter (under CallerRuns), so it must not block or
// call into the pool.
type waiter interface {
	do()
	finish(err error)
}

// A waitTask is SubmitWait's waiter. It is one allocation: done is a
// WaitGroup held by value, not a channel.
type waitTask struct {
	fn   func()
	err  error          // nil, or the task's *PanicError, or ErrStopped; written before done.Done
	done sync.WaitGroup // Add(1) by SubmitWait; Done exactly once, in finish
}

func (w *waitTask) do() { w.fn() }

// finish records the outcome and releases the waiting caller. Done makes
// everything the task wrote happen before SubmitWait returns.
func (w *waitTask) finish(err error) {
	w.err = err
	w.done.Done()
}

// A worker is the dispatcher's record of one worker goroutine, for reaping.
type worker struct {
	// parkedAt is 1 + the reaping clock's tick when the goroutine last
	// parked on p.work, 0 while it runs a task, and exited once it has
	// left for good. Written by the goroutine, read by the dispatcher.
	parkedAt atomic.Uint64
}

// exited marks a worker whose goroutine has ended.
const exited = ^uint64(0)

// valid reports whether t is a task rather than the zero job, which tells a
// worker to exit when received and means "no task" as a first task.
func (t job) valid() bool { return t.fn != nil || t.w != nil }

// startWorker starts a worker goroutine that runs first, if valid, then
// parks on p.work.
func (p *Pool) startWorker(w *worker, first job) {
	p.wg.Add(1)
	go p.runWorker(w, first)
}

// runWorker is the body of a worker goroutine: it runs t, then each task it
// receives on p.work, until it receives the zero job or p.work is closed.
func (p *Pool) runWorker(w *worker, t job) {
	defer p.wg.Done()
	returned := false
	defer func() {
		if !returned {
			// A task called runtime.Goexit, which nothing can stop; run
			// has already accounted for the task. Carry on in a new
			// goroutine so that the pool keeps its capacity.
			p.startWorker(w, job{})
		}
	}()
	for {
		if t.valid() {
			p.run(t, true)
		}
		w.parkedAt.Store(p.tick.Load() + 1)
		var open, yield bool
		if t.queued {
			// The dispatcher may be offering the next queued task.
			select {
			case t, open = <-p.work:
				yield = true
			default:
				t, open = <-p.work
			}
		} else {
			t, open = <-p.work
		}
		w.parkedAt.Store(0)
		if yield && t.queued {
			// Taking the offer without waiting made the dispatcher
			// runnable on this thread, where this task would hold it
			// up: no other worker could take a queued task until the
			// task ends, microseconds for a long one. Let the
			// dispatcher offer the next one first.
			runtime.Gosched()
		}
		if !open {
			// The dispatcher is exiting and counts down no more.
			p.stats.workers.Add(-1)
		}
		if !t.valid() {
			break
		}
	}
	w.parkedAt.Store(exited)
	returned = true
}

// run runs one task and accounts for it, on a worker or, for CallerRuns, in
// the submitter. A panic is recovered and reported to the task's waiter or
// the panic handler; a runtime.Goexit still counts the task as completed
// and reports nil to its waiter.
func (p *Pool) run(t job, onWorker bool) {
	fn := t.fn
	if t.w != nil {
		fn = t.w.do
	}
	var pe *PanicError
	defer func() {
		// Runs after the recover below, on return, panic and Goexit alike.
		switch {
		case t.w != nil && pe != nil:
			t.w.finish(pe)
		case t.w != nil:
			t.w.finish(nil)
		case pe != nil:
			p.cfg.panicHandler(pe)
		}
		if !onWorker {
			p.stats.callerRan.Add(1)
			return
		}
		p.stats.finished.Add(1)
		if p.wantIdle.Load() {
			// A pause waits for running tasks: tell the dispatcher one
			// ended. A signal already pending will do as well.
			select {
			case p.idleWake <- struct{}{}:
			default:
			}
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			pe = &PanicError{Value: v, Stack: debug.Stack()}
			p.stats.panicked.Add(1)
		}
	}()
	fn()
}
