package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errHandlerPanicked stands for the failure of a handler that panicked or
// called runtime.Goexit: the pool receives the panic itself.
var errHandlerPanicked = errors.New("natsjs: handler panicked or called runtime.Goexit")

// runTask is m's task on the pool: it runs the handler, unless a stop
// handed m back first, and settles m.
func (r *run) runTask(m *message) {
	r.mu.Lock()
	if m.stage != waiting || r.ctx.Err() != nil {
		// Stopping: the puller hands m back, if it has not already and
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
	// it to its panic handler; the message is settled on the way out.
	err := errHandlerPanicked
	defer func() {
		if err == nil {
			// The worker is free at once; m keeps its slot until the
			// acker has had the server confirm its ack.
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
// terminates m. Then it gives m's slot back.
func (r *run) settle(m *message, err error) {
	delivery := uint64(1)
	if md, mdErr := m.Msg.Metadata(); mdErr == nil {
		delivery = md.NumDelivered
	}
	last := r.maxDeliver > 0 && delivery >= uint64(r.maxDeliver)
	if !last && r.ctx.Err() != nil && r.leaveToStop(m) {
		return
	}
	defer r.release(m)
	// Settling goes on after a stop: it is how a stop finishes.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), settleTimeout)
	defer cancel()
	if last {
		// The server will not deliver m again: unless m goes elsewhere, a
		// work-queue stream keeps it for ever.
		if r.cfg.deadLetterJS != nil {
			if dlErr := r.deadLetter(ctx, m.Msg, delivery, err); dlErr != nil {
				// Keep m in its stream rather than lose it.
				_ = m.Msg.Nak()
				return
			}
		}
		_ = m.Msg.TermWithReason(fmt.Sprintf("natsjs: failed on delivery %d of %d", delivery, r.maxDeliver))
		return
	}
	if r.ctx.Err() != nil {
		// The handler most likely failed because the stop cancelled its
		// ctx, after the stop's hand-back: another process may take the
		// message at once.
		_ = m.Msg.Nak()
		return
	}
	if d := r.cfg.backoff(delivery); d > 0 {
		_ = m.Msg.NakWithDelay(d)
	} else {
		_ = m.Msg.Nak()
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

// release forgets a settled message and gives its slot back.
func (r *run) release(m *message) {
	r.mu.Lock()
	delete(r.held, m)
	r.mu.Unlock()
	r.releaseSlots(1)
}

// deadLetter publishes a copy of msg, which failed on its last delivery
// with cause, to the dead-letter subject, as WithDeadLetter says.
func (r *run) deadLetter(ctx context.Context, msg jetstream.Msg, delivery uint64, cause error) error {
	out := nats.NewMsg(r.cfg.deadLetterSubject)
	out.Data = msg.Data()
	for k, vs := range msg.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			k = "Natsjs-Original-" + strings.TrimPrefix(k, "Nats-")
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	if md, err := msg.Metadata(); err == nil {
		out.Header.Set("Natsjs-Stream", md.Stream)
		out.Header.Set("Natsjs-Consumer", md.Consumer)
		out.Header.Set("Natsjs-Sequence", strconv.FormatUint(md.Sequence.Stream, 10))
	}
	out.Header.Set("Natsjs-Subject", msg.Subject())
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
