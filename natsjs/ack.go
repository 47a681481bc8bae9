package natsjs

import (
	"fmt"
	"time"
)

// The acker acks the handled messages, a batch at a time, off the workers.
// It acks each message of a batch with a plain Ack but the last, whose ack
// frees the batch's slots: on the raw path it carries the next pull, which
// takes them at once; on the fetch path, and on the raw path during a stop,
// it asks the server for a confirmation (a probe), and the slots stay
// taken until the server answers, or the settle timeout passes. A stop
// waits for its probes: when Run returns, the server has confirmed every
// ack the run sent, or the error handler was told it did not
// (ErrNotConfirmed). Only the raw path can carry a pull: jetstream's Fetch
// sends its pulls as requests of their own, which the server queues apart
// from the acks.
//
// A batch is whatever was handled while the acker was busy, once it counts
// ackAt messages: under load, batches grow. A batch does not wait for ackAt
// messages when no message waits for a worker (the slots are needed), when
// the watcher polls, or once the stop has begun.

// queueAck hands m, whose handler returned nil, to the acker. Its stay, and
// its count in running, end once the acker has acked it.
func (r *run) queueAck(m *message) {
	r.ackMu.Lock()
	r.toAck = append(r.toAck, m)
	due := len(r.toAck) >= r.ackAt
	r.ackMu.Unlock()
	if due || r.waiting.Load() == 0 {
		r.wakeAcker()
	}
}

// ackNow has the acker ack every queued message, however few.
func (r *run) ackNow() {
	r.ackMu.Lock()
	r.ackAll = len(r.toAck) > 0
	r.ackMu.Unlock()
	r.wakeAcker()
}

// starving tells the puller and the acker that no message waits for a
// worker any more: they stop waiting for batches.
func (r *run) starving() {
	select {
	case r.pullNow <- struct{}{}:
	default: // the puller is already due to look
	}
	r.wakeAcker()
}

func (r *run) wakeAcker() {
	select {
	case r.ackWake <- struct{}{}:
	default: // the acker is already due to look
	}
}

// ackLoop is the acker: it acks the queued messages, a batch at a time,
// until exit is closed. Only the stop closes exit, once running says that
// every handled message was acked.
func (r *run) ackLoop(exit <-chan struct{}) {
	var batch []*message // reused: it and toAck swap arrays
	for {
		select {
		case <-r.ackWake:
		case <-exit:
			return
		}
		r.ackMu.Lock()
		if r.ackAll || len(r.toAck) >= r.ackAt || r.waiting.Load() == 0 {
			batch, r.toAck = r.toAck, batch
			r.ackAll = false
		}
		r.ackMu.Unlock()
		if len(batch) > 0 {
			r.ackBatch(batch)
			clear(batch) // let the settled messages go
			batch = batch[:0]
		}
	}
}

// ackBatch acks every message in batch that its handler did not settle
// itself, and ends the messages' stay. The last message it acks carries
// a pull, or asks for a confirmation. A batch of messages that their
// handlers all settled themselves has nothing of the run's to carry
// either: its slots are freed at once, as the handlers' own settling was
// sent before they returned.
func (r *run) ackBatch(batch []*message) {
	carrier := -1
	for i, m := range batch {
		if !m.close() {
			carrier = i
		}
	}
	for i, m := range batch {
		if i < carrier && !m.settled {
			r.sent(m, "ack", m.wire.Ack())
		}
	}
	r.mu.Lock()
	for _, m := range batch {
		delete(r.held, m)
	}
	r.mu.Unlock()
	defer r.running.Add(-len(batch))
	if carrier < 0 {
		r.slots.releaseHeld(len(batch))
		return
	}
	c := batch[carrier]
	now := time.Now()
	probeDeadline := now.Add(settleTimeout)
	msgs := append([]*message(nil), batch...)
	var pullID, probeID uint64
	var n int
	if r.canCarry && r.ctx.Err() == nil {
		pullID, n, probeID = r.slots.carry(len(batch), r.maxBatch, now.Add(r.pullDeadline), probeDeadline, msgs)
	}
	if n == 0 {
		// No pull may follow: the path cannot carry one, or the run is
		// stopping.
		id := r.slots.probeAcked(len(batch), probeDeadline, msgs)
		r.path.confirm(c, id)
		r.lastAcked.Store(c)
		return
	}
	if err := r.path.carry(c, pullID, n); err != nil {
		r.slots.ended(pullID, -1)
		r.report(c.messageError("ack", err))
		r.pullFailed(err)
	}
	if probeID != 0 {
		r.path.confirm(c, probeID) // an ack again, with a reply
	}
	r.lastAcked.Store(c)
}

// probeFailed frees the slots of probe id, which failed with err, and
// tells the error handler which acks were not confirmed.
func (r *run) probeFailed(id uint64, err error) {
	if p, ok := r.slots.endProbe(id); ok {
		r.reportProbe(p, err)
	}
}

// reportProbe tells the error handler of the acks probe p did not confirm.
func (r *run) reportProbe(p probeRecord, err error) {
	if r.cfg.onError == nil {
		return
	}
	if len(p.msgs) == 0 {
		r.report(fmt.Errorf("natsjs: Run: consumer %q: %d messages asked for were neither delivered nor returned: %w", r.name, p.n, err))
		return
	}
	for _, m := range p.msgs {
		if !m.settled {
			r.report(m.messageError("confirm ack", err))
		}
	}
}
