package workerpool

import "sync"

// A Future is the pending result of one task started by [Go]. Its methods
// are safe for concurrent use: any number of goroutines may call Wait and
// Done, any number of times.
type Future[T any] struct {
	fn  func() (T, error) // the task; nil once it ended
	val T                 // fn's result; written before wg.Done
	err error             // fn's error, *PanicError, or why fn never ran; written before wg.Done

	// wg is Add(1) in Go and Done exactly once, in finish: Wait waits on it
	// without allocating, and it makes the task's writes happen before
	// Wait returns.
	wg sync.WaitGroup

	// done is made by the first Done call that comes before the task ends,
	// and closed when it ends; if no Done call came first, finish sets it to
	// closedChan instead, so that a Future nobody selects on never pays for
	// a channel. Guarded by mu.
	mu   sync.Mutex
	done chan struct{}
}

// closedChan is the already-closed channel that Done returns for a Future
// that ended before anyone asked for its channel.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Go submits fn to s as [Pool.Submit] does and returns a Future for its
// result. Go blocks only as Submit would: while a bounded queue is full
// under the [Block] policy. If s does not accept fn, the Future is already
// done and its Wait returns that error: [ErrStopped], [ErrQueueFull] under
// [Reject], or [ErrNilTask] for a nil fn. Under [CallerRuns] a full queue
// makes Go run fn itself before returning.
//
// Go allocates one object beyond fn's closure: the Future, 64 bytes for a
// Future[int]. Done allocates a channel only if it is called before fn ends.
//
// Go panics if s is nil.
func Go[T any](s Submitter, fn func() (T, error)) *Future[T] {
	p, _ := mustTarget("Go", s)
	f := &Future[T]{fn: fn}
	f.wg.Add(1)
	if fn == nil {
		f.finish(ErrNilTask)
		return f
	}
	if err := submitWaiter(s, nil, f, p.cfg.overflow); err != nil {
		f.finish(err)
	}
	return f
}

// Wait waits for the task to end and returns its result: fn's value and
// error; the zero T and a [*PanicError] if fn panicked; the zero T and the
// reason if fn never ran: [ErrStopped] when the pool was stopped before fn
// started (see [Pool.Stop]), or the error with which the pool refused it
// (see [Go]). If fn called [runtime.Goexit], Wait returns the zero T and a
// nil error, as [Pool.SubmitWait] does.
//
// Everything fn did happens before Wait returns. Wait may be called any
// number of times, from any number of goroutines; each call returns the same
// result. Calling Wait from inside a task of the same pool can deadlock, as
// SubmitWait can.
func (f *Future[T]) Wait() (T, error) {
	f.wg.Wait()
	return f.val, f.err
}

// Done returns a channel that is closed when the task has ended, so that a
// select can wait for several Futures or for a Future and a timeout. Once it
// is closed, [Future.Wait] returns at once. Done returns the same channel to
// every caller; the first call before the task ends allocates it.
func (f *Future[T]) Done() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

func (f *Future[T]) take() bool { return true } // its submitter never gives up

// do runs the task on a worker, or in the caller under CallerRuns.
func (f *Future[T]) do(*locals) error { f.val, f.err = f.fn(); return nil }

// finish records why the task ended and releases Done and Wait. err is nil
// after fn returned or called runtime.Goexit; else it replaces fn's error,
// which fn never got to return.
func (f *Future[T]) finish(err error) {
	if err != nil {
		f.err = err
	}
	f.fn = nil // let the closure go
	f.mu.Lock()
	if f.done == nil {
		f.done = closedChan
	} else {
		close(f.done)
	}
	f.mu.Unlock()
	f.wg.Done()
}
