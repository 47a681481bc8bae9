package workerpool

import (
	"fmt"
	"log/slog"
	"time"
)

// DefaultIdleTimeout is how long a worker above the minimum may stay idle
// before it exits, unless [WithIdleTimeout] says otherwise.
const DefaultIdleTimeout = 2 * time.Second

// An Option configures a [Pool] at construction; pass options to [New].
type Option func(*config)

// Overflow says what submitting does when the waiting queue is bounded
// (see [WithMaxWaiting]) and full. It never applies to an unbounded queue.
type Overflow int

const (
	// Block makes Submit wait until the queue has room: backpressure.
	// This is the default.
	Block Overflow = iota
	// Reject makes Submit return [ErrQueueFull] at once.
	Reject
	// CallerRuns makes Submit run the task in the calling goroutine, which
	// slows the submitter down to the pool's pace without losing the task.
	// Such tasks run outside the workers, so they are not counted against
	// the pool's maximum.
	CallerRuns
)

// String returns "block", "reject" or "caller-runs".
func (o Overflow) String() string {
	switch o {
	case Block:
		return "block"
	case Reject:
		return "reject"
	case CallerRuns:
		return "caller-runs"
	}
	return fmt.Sprintf("Overflow(%d)", int(o))
}

// WithIdleTimeout sets how long a worker may stay idle before it exits; the
// pool never reaps below its minimum (see [WithMinWorkers]). A worker exits
// between one and two timeouts after it went idle. 0 uses
// [DefaultIdleTimeout]; a negative value never reaps.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) { c.idleTimeout = d }
}

// WithMinWorkers sets how many workers the pool starts in [New] and keeps
// through idle periods. n must be between 0 (the default) and the pool's
// maximum.
func WithMinWorkers(n int) Option {
	return func(c *config) { c.minWorkers = n }
}

// WithMaxWaiting bounds the waiting queue: at most n tasks wait for a
// worker, and a submission beyond that is handled as [WithOverflow] says.
// 0, the default, means unbounded; n must not be negative.
func WithMaxWaiting(n int) Option {
	return func(c *config) { c.maxWaiting = n }
}

// WithOverflow sets what [Pool.Submit], [Pool.SubmitContext] and
// [Pool.SubmitWait] do when the bounded queue is full. The default is
// [Block]. [Pool.TrySubmit] always rejects instead.
func WithOverflow(o Overflow) Option {
	return func(c *config) { c.overflow = o }
}

// WithPanicHandler sets the function called, on the goroutine that ran the
// task, with every panic of a task that has no waiting caller
// ([Pool.SubmitWait] returns its task's panic instead). The task counts as
// completed before h is called. The pool keeps its full capacity either
// way, even if h calls [runtime.Goexit]. The default logs the panic and its
// stack with [slog.Error]; nil restores the default. A panic in h itself is
// not recovered: it crashes the program, as any unrecovered panic does,
// also when the task ran in its submitter under [CallerRuns].
func WithPanicHandler(h func(*PanicError)) Option {
	return func(c *config) { c.panicHandler = h }
}

// WithoutPanicRecovery makes the pool leave a task's panic alone: it
// crashes the program, with the task's own stack, as it would without a
// pool, where the default recovers it (see [WithPanicHandler]). Crash
// monitoring then sees every panic; the cost is the program. The pool
// counts nothing of a panic on a worker and releases no one waiting (the
// task's SubmitWait, a StopWait), so that the program cannot exit cleanly
// before the panic ends it; the crash reads "[recovered, repanicked]", as
// the pool looks at the panic as it passes. A [Local]'s close that panics
// crashes the program too. Under [CallerRuns] the panic goes up to the
// caller of Submit, which may recover it; the task counts as completed.
func WithoutPanicRecovery() Option {
	return func(c *config) { c.noRecovery = true }
}

// WithLogger sets the logger of the default panic handler, which logs a
// task's panic and its stack at level Error; nil, or none, logs with
// [slog.Default] as it is when the panic comes, so that a program may set
// its default logger after making its pools. A handler set with
// [WithPanicHandler] replaces it.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithTaskTimings makes the pool measure how long each task waits (from when
// the pool accepts it to when a worker starts it) and runs, and sum them up in
// [Status] (Wait and Run), for the pool and for each sub-pool. It costs three
// clock reads per task, one on the dispatcher as it accepts the task and two on
// the worker, and a few atomic additions shared by all workers: see the
// README's figures. Without it the pool reads no clock for its tasks.
func WithTaskTimings() Option {
	return func(c *config) { c.timings = true }
}

// WithTaskObserver sets f to be called with every task's timing, and turns
// timings on, as [WithTaskTimings] does. f is called on the goroutine that
// ran the task (a worker, or a [CallerRuns] submitter) as soon as the task
// ended, panicked or called runtime.Goexit, and before its waiter learns
// of it: a SubmitWait or Call returns after f did. Calls for tasks that end
// at the same time run concurrently. f must be quick and must not block:
// its worker runs no task until f returns. It must not call the pool's
// methods that wait for tasks (SubmitWait, Call, ...), which can deadlock;
// Stop, StopWait and Shutdown it may call (see Stopping in the package
// doc). A nil f sets no observer.
func WithTaskObserver(f func(TaskTiming)) Option {
	return func(c *config) {
		c.observer = f
		c.timings = c.timings || f != nil
	}
}

// config is the pool's configuration after options were applied.
type config struct {
	minWorkers   int
	maxWaiting   int // 0: unbounded
	idleTimeout  time.Duration
	overflow     Overflow
	panicHandler func(*PanicError)
	timings      bool             // WithTaskTimings
	observer     func(TaskTiming) // WithTaskObserver
	noRecovery   bool             // WithoutPanicRecovery
	logger       *slog.Logger     // WithLogger
}

// newConfig applies opts and panics, as New documents, on a configuration
// no pool can have.
func newConfig(maxWorkers int, opts []Option) config {
	if maxWorkers < 1 {
		panic(fmt.Sprintf("workerpool: New(%d): maxWorkers must be at least 1", maxWorkers))
	}
	var c config
	for i, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("workerpool: New: option %d is nil", i))
		}
		opt(&c)
	}
	if c.minWorkers < 0 || c.minWorkers > maxWorkers {
		panic(fmt.Sprintf("workerpool: New: WithMinWorkers(%d) is outside 0..maxWorkers (%d)", c.minWorkers, maxWorkers))
	}
	if c.maxWaiting < 0 {
		panic(fmt.Sprintf("workerpool: New: WithMaxWaiting(%d) is negative", c.maxWaiting))
	}
	if c.overflow < Block || c.overflow > CallerRuns {
		panic(fmt.Sprintf("workerpool: New: WithOverflow(%d) is not Block, Reject or CallerRuns", int(c.overflow)))
	}
	if c.idleTimeout == 0 {
		c.idleTimeout = DefaultIdleTimeout
	}
	if c.panicHandler == nil {
		logger := c.logger
		c.panicHandler = func(pe *PanicError) {
			l := logger
			if l == nil {
				l = slog.Default() // the default of the moment: a program may set it after New
			}
			l.Error("workerpool: task panicked", "panic", pe.Value, "stack", string(pe.Stack))
		}
	}
	return c
}

// outboxDepth is the most tasks the hand-off's outbox holds: what workers
// can take without waiting for the loop. Without it, a worker that ends a
// task waits for the loop to give it the next, and a small one (twice the
// maximum) made CPU-bound tasks and submit-and-wait slower in
// benchmarks/PAIRS.md. Tasks in the outbox wait too, so the bound of
// WithMaxWaiting covers them.
func (c *config) outboxDepth() int {
	if c.maxWaiting > 0 {
		return min(outboxDepth, c.maxWaiting)
	}
	return outboxDepth
}

const outboxDepth = 64
