package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// errHandlerPanicked stands for the failure of a handler that panicked or
// called runtime.Goexit: the pool receives the panic itself.
var errHandlerPanicked = errors.New("natsjs: handler panicked or called runtime.Goexit")

// runTask is m's task on the pool: it runs the handler, unless a stop
// handed m back first, and settles m. It runs on a worker, or, under
// CallerRuns, on the feeder's goroutine; a handler that panics or calls
// runtime.Goexit fails alike on either.
func (r *run) runTask(m *message) {
	r.mu.Lock()
	if m.stage != waiting || r.ctx.Err() != nil {
		// Stopping: the stop hands m back, if it has not already and
		// the task outlived its message, perhaps its run.
		r.mu.Unlock()
		return
	}
	m.stage = started
	if r.waiting.Add(-1) == 0 {
		r.starving()
	}
	r.running.Add(1)
	r.mu.Unlock()

	// A panic is not recovered here, so that the pool counts it and passes
	// it to its panic handler; the message is settled on the way out, as
	// it is when the handler calls runtime.Goexit.
	err := errHandlerPanicked
	defer func() {
		if err == nil {
			// The worker is free at once; the acker acks m.
			r.queueAck(m)
			return
		}
		defer r.running.Done()
		r.settle(m, err)
	}()
	err = r.h(r.ctx, m)
}

// settle ends the stay of m, whose handler failed with err: it hands m
// back with the backoff or, on m's last delivery, it dead-letters and
// terminates m. Then it frees m's slot.
func (r *run) settle(m *message, err error) {
	delivery := uint64(1)
	if md, mdErr := m.wire.Metadata(); mdErr == nil {
		delivery = md.NumDelivered
	}
	maxDeliver := r.maxDeliver.Load()
	last := maxDeliver > 0 && delivery >= uint64(maxDeliver)
	if !last && r.ctx.Err() != nil && r.leaveToStop(m) {
		return
	}
	defer r.release(m)
	// Once closed, no progress message can follow the Nak and undo its
	// delay.
	if m.close() {
		return // the handler settled m itself, then failed
	}
	if last {
		// The server will not deliver m again: unless m goes elsewhere, a
		// work-queue stream keeps it for ever.
		if r.cfg.deadLetterJS != nil {
			// Publishing goes on after a stop: it is how a stop finishes.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), settleTimeout)
			dlErr := r.deadLetter(ctx, m, delivery, err)
			cancel()
			if dlErr != nil {
				// Keep m in its stream rather than lose it.
				r.report(m.messageError("dead-letter", dlErr))
				r.sent(m, "nak", m.wire.Nak())
				return
			}
		}
		r.sent(m, "term", m.wire.TermWithReason(fmt.Sprintf("natsjs: failed on delivery %d of %d", delivery, maxDeliver)))
		return
	}
	if r.ctx.Err() != nil {
		// The handler most likely failed because the stop cancelled its
		// ctx, after the stop's hand-back: another process may take the
		// message at once.
		r.sent(m, "nak", m.wire.Nak())
		return
	}
	r.sent(m, "nak", m.wire.NakWithDelay(r.cfg.backoff(delivery)))
}

// sent reports err, the result of sending op for m, which the run
// settles, if it failed.
func (r *run) sent(m *message, op string, err error) {
	if err != nil {
		r.report(m.messageError(op, err))
	}
}

// leaveToStop makes m, whose handler failed during a stop on a delivery
// before its last, wait again, to be handed back at once by the stop, as a
// message that never started is, unless the stop has handed back already.
// It reports whether it did.
func (r *run) leaveToStop(m *message) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handingBack {
		return false
	}
	m.stage = waiting
	r.waiting.Add(1)
	return true
}

// release forgets a settled message and frees its slot.
func (r *run) release(m *message) {
	r.mu.Lock()
	delete(r.held, m)
	r.mu.Unlock()
	r.slots.releaseHeld(1)
}

// deadLetter publishes a copy of m, which failed on its last delivery with
// cause, to the dead-letter subject, as WithDeadLetter says.
func (r *run) deadLetter(ctx context.Context, m *message, delivery uint64, cause error) error {
	out := nats.NewMsg(r.cfg.deadLetterSubject)
	out.Data = m.wire.Data()
	for k, vs := range m.wire.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			k = "Natsjs-Original-" + strings.TrimPrefix(k, "Nats-")
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	if md, err := m.wire.Metadata(); err == nil {
		out.Header.Set("Natsjs-Stream", md.Stream)
		out.Header.Set("Natsjs-Consumer", md.Consumer)
		out.Header.Set("Natsjs-Sequence", strconv.FormatUint(md.Sequence.Stream, 10))
	}
	out.Header.Set("Natsjs-Subject", m.wire.Subject())
	out.Header.Set("Natsjs-Deliveries", strconv.FormatUint(delivery, 10))
	out.Header.Set("Natsjs-Error", headerValue(cause.Error()))
	_, err := r.cfg.deadLetterJS.PublishMsg(ctx, out)
	return err
}

// headerValue makes s fit in a header value: one line, at most 1024 bytes.
func headerValue(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}
