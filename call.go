package workerpool

import "context"

// Call runs fn on one of s's workers and returns its result, unless ctx is
// done first: then Call returns ctx.Err() at once. It is [Pool.SubmitWait]
// for a function with a result, bounded by a context, like tunny's
// ProcessCtx.
//
//   - If ctx is done before fn starts, fn never runs: it leaves the queue
//     at once, so that a bounded queue has room again. Status counts it in
//     Canceled, not in Completed.
//   - If ctx is done while fn runs, Call returns ctx.Err() without waiting
//     for fn, whose ctx (the same) is done too: fn should return soon. The
//     worker stays busy, and counts as Busy, until it does.
//   - A panic in fn comes back as a [*PanicError]; a stopped pool, or a
//     stop that drops fn before it starts, gives [ErrStopped]; a nil fn,
//     [ErrNilTask].
//
// fn runs on a worker, never in the caller: a full queue makes Call wait
// for room (or for ctx) under [Block] and under [CallerRuns], and return
// [ErrQueueFull] at once under [Reject], as [Go] does. On a sub-pool it
// counts against the sub-pool's limit. Everything fn did
// happens before Call returns its result; after ctx.Err(), nothing is
// promised about fn, which may still run.
//
// Call allocates two objects: its task record and a channel. Calling it
// from inside a task of the same pool can deadlock, as SubmitWait can.
//
// Call panics if ctx or s is nil.
func Call[T any](ctx context.Context, s Submitter, fn func(context.Context) (T, error)) (T, error) {
	mustContext("Call", ctx)
	mustTarget("Call", s)
	if fn == nil {
		var zero T
		return zero, ErrNilTask
	}
	return call(ctx, s, &callTask[T]{ctx: ctx, fn: fn})
}

// call submits c, waits for it or for ctx, and returns the result.
func call[T any](ctx context.Context, s Submitter, c *callTask[T]) (T, error) {
	var zero T
	p, sub := s.target()
	if err := ctx.Err(); err != nil {
		if p.closed.Load() || sub != nil && sub.closed.Load() {
			return zero, ErrStopped
		}
		return zero, err
	}
	c.done = make(chan struct{})
	overflow := p.cfg.overflow
	if overflow == CallerRuns {
		overflow = Block // fn runs on a worker
	}
	if err := submitWaiter(s, ctx, c, overflow); err != nil {
		return zero, err
	}
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
	}
	if p.giveUp(s, []cancelable{c}) == 0 {
		// The pool took fn first: it runs, or has just ended.
		select {
		case <-c.done:
			return c.val, c.err
		default:
		}
	}
	return zero, ctx.Err()
}

// A callTask is the waiter of one Call.
type callTask[T any] struct {
	takeState
	where queueSpot
	ctx   context.Context
	fn    func(context.Context) (T, error)
	// with, if set, runs instead of fn, with the worker's states (see
	// CallWith).
	with func(*locals) (T, error)
	val  T     // fn's result; written before done is closed
	err  error // fn's error, *PanicError, or why fn never ran; written before done is closed
	done chan struct{}
}

func (c *callTask[T]) spot() *queueSpot { return &c.where }

func (c *callTask[T]) do(l *locals) error {
	if c.with != nil {
		c.val, c.err = c.with(l)
		return nil
	}
	c.val, c.err = c.fn(c.ctx)
	return nil
}

func (c *callTask[T]) finish(err error) {
	if err != nil {
		c.err = err
	}
	close(c.done)
}
