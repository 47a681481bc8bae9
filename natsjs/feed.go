package natsjs

import (
	"errors"
	"time"

	"github.com/dispatchkit/workerpool"
)

// register takes charge of a delivered message, in the slot it took: it
// holds it and submits it to the pool, unless the run is stopping. It
// submits it itself if the feeder has nothing to submit and the pool takes
// the task without waiting; otherwise it hands it to the feeder. Without
// the direct path every message costs two more goroutine switches, to the
// feeder and back; without the feeder a pool whose bounded queue blocks
// would stop the path from taking in what the pulls bring, which
// then gets no progress messages.
func (r *run) register(m *message) {
	r.mu.Lock()
	if r.handingBack {
		// The stop has handed back what waited: this one goes back too.
		r.mu.Unlock()
		r.handBack(m)
		return
	}
	r.held[m] = struct{}{}
	r.waiting.Add(1)
	r.mu.Unlock()
	if r.ctx.Err() != nil {
		return // the stop hands m back
	}
	// Only register adds to feeding, so if it is 0 every earlier message
	// was submitted already, and m keeps its place in line. TrySubmit
	// never runs the task here, whatever the pool's overflow policy.
	if r.feeding.Load() == 0 {
		switch err := r.s.TrySubmit(m.task); {
		case err == nil:
			return
		case errors.Is(err, workerpool.ErrStopped):
			r.end(workerpool.ErrStopped)
			return // m waits for the stop to hand it back
		}
		// The bounded queue is full: the feeder waits for room.
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handingBack {
		// A stop began meanwhile and handed m back with the others that
		// waited; it closes queue next.
		return
	}
	r.feeding.Add(1)
	r.queue <- m // never blocks: see queue
}

// feed is the feeder: it submits the registered messages to the pool, in
// the order they came, until the stop closes queue. It submits from a
// goroutine of its own, which the pool may use to run a handler under
// CallerRuns: if that handler calls runtime.Goexit, the goroutine ends,
// the handler counts as failed (see runTask), and feed starts another.
func (r *run) feed() {
	for {
		done := make(chan bool, 1)
		go func() {
			drained := false
			defer func() { done <- drained }()
			for m := range r.queue {
				r.feedOne(m)
			}
			drained = true
		}()
		if <-done {
			return
		}
	}
}

// feedOne submits m, and counts it fed even if the pool runs its handler
// here and the handler calls runtime.Goexit.
func (r *run) feedOne(m *message) {
	defer r.feeding.Add(-1)
	r.submit(m)
}

// submit submits m's task to the pool. If the pool does not take it, m
// stays held, waiting, until the stop hands it back; if the pool is
// stopped, it ends the run.
func (r *run) submit(m *message) {
	var pause time.Duration // while the pool's bounded queue rejects
	for {
		// Returns ctx.Err() at once once r.ctx is done: the stop.
		err := r.s.SubmitCtx(r.ctx, m.task)
		switch {
		case err == nil:
			return
		case errors.Is(err, workerpool.ErrQueueFull):
			// The pool rejects rather than waits (WithOverflow(Reject)):
			// wait for room ourselves; progress keeps m meanwhile.
			pause = min(max(2*pause, time.Millisecond), 50*time.Millisecond)
			select {
			case <-time.After(pause):
				continue
			case <-r.ctx.Done():
			}
		case errors.Is(err, workerpool.ErrStopped):
			r.end(workerpool.ErrStopped)
		}
		return // stopping: the stop hands m back
	}
}
