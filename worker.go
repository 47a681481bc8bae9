package workerpool

import (
	"fmt"
	"runtime/debug"
	"sync"
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
// set.
type job struct {
	fn func()
	w  waiter
}

// A waiter is a task whose submitter learns what became of it: the task of
// a SubmitWait, a Future or a Group. The pool calls finish exactly once:
// after do returned, panicked or called runtime.Goexit (with nil or the
// *PanicError), or with ErrStopped when Stop dropped the task before it
// started.
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

// A worker is the dispatcher's handle on one worker goroutine.
type worker struct {
	// jobs carries the next task to the goroutine; closing it tells the
	// goroutine to exit. Its buffer of one lets the dispatcher hand over a
	// task without waiting: it only hands a task to a worker that reported
	// back on ready and so has an empty buffer.
	jobs chan job
	// idleSince is the reaping clock's tick when the worker last went idle.
	// Owned by the dispatcher.
	idleSince uint64
}

// work is the body of a worker goroutine: it runs each task the dispatcher
// hands it and reports back on p.ready, until its channel is closed.
func (p *Pool) work(w *worker) {
	defer p.wg.Done()
	returned := false
	defer func() {
		if !returned {
			// A task called runtime.Goexit, which nothing can stop; run
			// has already accounted for the task. Carry on in a new
			// goroutine so that the pool keeps its capacity.
			p.wg.Add(1)
			go p.resume(w)
		}
	}()
	for t := range w.jobs {
		p.run(t)
		p.ready <- w
	}
	returned = true
}

// resume continues a worker whose goroutine ended in runtime.Goexit.
func (p *Pool) resume(w *worker) {
	p.ready <- w
	p.work(w)
}

// run runs one task and accounts for it. A panic is recovered and reported
// to the waiting caller or the panic handler; a runtime.Goexit still counts
// the task as completed and releases its waiting caller with a nil error.
func (p *Pool) run(t job) {
	fn := t.fn
	if t.w != nil {
		fn = t.w.do
	}
	var pe *PanicError
	defer func() {
		// Runs after the recover below, on return, panic and Goexit alike.
		p.stats.completed.Add(1)
		switch {
		case t.w != nil && pe != nil:
			t.w.finish(pe)
		case t.w != nil:
			t.w.finish(nil)
		case pe != nil:
			p.cfg.panicHandler(pe)
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
