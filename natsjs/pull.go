package natsjs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pull takes slots, pulls as many messages as it took and registers them,
// until r.ctx is done. It returns once no pull is outstanding.
func (r *run) pull() {
	var pause time.Duration // after a failed pull; doubles while they fail
	for {
		n := r.takeSlots()
		if n == 0 {
			return
		}
		batch, err := r.cons.Fetch(n, jetstream.FetchMaxWait(pullWait))
		if err == nil {
			// The batch's channel has room for the whole batch, and is
			// closed when the server ends the pull, so reading it to the
			// end leaves no message sent to a pull nobody reads.
			got := 0
			for msg := range batch.Messages() {
				got++
				r.register(msg)
			}
			r.releaseSlots(n - got)
			err = batch.Error()
		} else {
			r.releaseSlots(n)
		}
		if err == nil || r.ctx.Err() != nil {
			pause = 0
			continue
		}
		if r.fatal(err) {
			return
		}
		pause = min(max(2*pause, 50*time.Millisecond), 2*time.Second)
		select {
		case <-time.After(pause):
		case <-r.ctx.Done():
		}
	}
}

// takeSlots waits for a free slot, then takes every other free one up to a
// batch; while messages wait for the workers, it waits for pullAt free
// slots. It returns how many it took, or 0 if r.ctx is done.
func (r *run) takeSlots() int {
	select {
	case <-r.ctx.Done():
		return 0
	default:
	}
	select {
	case r.slots <- struct{}{}:
	case <-r.ctx.Done():
		return 0
	}
	n := 1
	for n < r.maxBatch {
		select {
		case r.slots <- struct{}{}:
			n++
			continue
		default:
		}
		if n >= r.pullAt || r.waiting.Load() == 0 {
			return n
		}
		// Messages wait for the workers: wait for a bigger batch, unless
		// they run out first.
		select {
		case r.slots <- struct{}{}:
			n++
		case <-r.pullNow:
		case <-r.ctx.Done():
			r.releaseSlots(n)
			return 0
		}
	}
	return n
}

// releaseSlots gives n slots back.
func (r *run) releaseSlots(n int) {
	for range n {
		<-r.slots
	}
}

// fatal reports whether a failed pull ends the run, and ends it if so: when
// the consumer or its stream is gone or the connection is closed. Anything
// else (a timeout, a server restarting, a leader changing) is worth another
// pull.
func (r *run) fatal(err error) bool {
	switch {
	case errors.Is(err, jetstream.ErrConsumerDeleted),
		errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrStreamNotFound),
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrBadSubscription):
	case errors.Is(err, jetstream.ErrBadRequest):
		// A request the server refuses will be refused again.
	default:
		// No responders, among others, is what a pull to a consumer that
		// no longer exists gets: ask the server whether it does.
		ctx, cancel := context.WithTimeout(r.ctx, settleTimeout)
		_, infoErr := r.cons.Info(ctx)
		cancel()
		if !errors.Is(infoErr, jetstream.ErrConsumerNotFound) && !errors.Is(infoErr, jetstream.ErrStreamNotFound) {
			return false
		}
		err = infoErr
	}
	r.end(fmt.Errorf("natsjs: Consume: pulling from consumer %q: %w", r.cons.CachedInfo().Name, err))
	return true
}

// register takes charge of a message a pull brought, in the slot taken for
// it: it holds it and submits it to the pool, unless the run is stopping.
// It submits it itself if the feeder has nothing to submit and the pool
// takes the task without waiting; otherwise it hands it to the feeder.
// Without the direct path every message costs two more goroutine switches,
// to the feeder and back; without the feeder a pool whose bounded queue
// blocks would stop the puller from registering what its pull brings.
func (r *run) register(msg jetstream.Msg) {
	m := &message{Msg: msg} // waiting
	m.task = func() { r.runTask(m) }
	r.mu.Lock()
	r.held[m] = struct{}{}
	r.waiting.Add(1)
	r.mu.Unlock()
	if r.ctx.Err() != nil {
		return // the puller hands m back
	}
	// Only the puller adds to feeding, so if it is 0 every earlier message
	// was submitted already, and m keeps its place in line.
	if r.feeding.Load() == 0 {
		switch err := r.p.TrySubmit(m.task); {
		case err == nil:
			return
		case errors.Is(err, workerpool.ErrStopped):
			r.end(workerpool.ErrStopped)
			return // m waits for the stop to hand it back
		}
		// The bounded queue is full: the feeder waits for room.
	}
	r.feeding.Add(1)
	r.queue <- m // never blocks: see queue
}

// feed submits the registered messages to the pool, in the order they
// came, until the puller closes queue.
func (r *run) feed() {
	for m := range r.queue {
		r.submit(m)
		r.feeding.Add(-1)
	}
}

// submit submits m's task to the pool. If the pool does not take it, m
// stays held, waiting, until the stop hands it back; if the pool is
// stopped, it ends the run.
func (r *run) submit(m *message) {
	var pause time.Duration // while the pool's bounded queue rejects
	for {
		// Returns ctx.Err() at once once r.ctx is done: the stop.
		err := r.p.SubmitCtx(r.ctx, m.task)
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
		return // stopping: the puller hands m back
	}
}
