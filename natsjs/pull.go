package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Run pulls on one subscription, made when it starts, to a wildcard under
// a fresh inbox, on js's connection: each pull, and each probe, has its
// own reply subject under it (inbox.p<id>, inbox.c<id>), so that a status
// or an answer names what it ends. The server delivers messages with
// their own subject, so a message does not say which pull it was for: the
// flow counts what is owed as a whole. The client restores the
// subscription after a reconnection; the pulls sent before it stay owed
// until their deadline, as the server may still serve them.
//
// Several pulls may be out at once. A pull is either plain, sent by the
// puller (Run's own goroutine) with slots no unconfirmed ack holds, or
// carried by the ack of a message a runner handled (+NXT), with that
// message's slot and those of the plain acks sent before (see flow).

// subscribe makes r's subscription.
func (r *run) subscribe(info *jetstream.ConsumerInfo) error {
	r.nextSubject = apiPrefix(r.js.Options()) + "CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name
	r.inbox = r.nc.NewInbox() + "."
	sub, err := r.nc.Subscribe(r.inbox+"*", r.receive)
	if err != nil {
		return fmt.Errorf("natsjs: Run: subscribing: %w", err)
	}
	// The subscription's pending messages are bounded by the flow.
	_ = sub.SetPendingLimits(-1, -1)
	r.sub = sub
	return nil
}

// pullBody appends the JSON of pull p to buf.
func (r *run) pullBody(buf []byte, p pull) []byte {
	buf = append(buf, `{"batch":`...)
	buf = strconv.AppendInt(buf, int64(p.n), 10)
	buf = append(buf, `,"expires":`...)
	buf = strconv.AppendInt(buf, r.pullExpires.Nanoseconds(), 10)
	if p.maxBytes > 0 {
		buf = append(buf, `,"max_bytes":`...)
		buf = strconv.AppendInt(buf, int64(p.maxBytes), 10)
	}
	return append(buf, '}')
}

// pullReply returns the reply subject of pull id.
func (r *run) pullReply(id uint64) string { return r.inbox + "p" + strconv.FormatUint(id, 10) }

// probeReply returns the reply subject of probe id.
func (r *run) probeReply(id uint64) string { return r.inbox + "c" + strconv.FormatUint(id, 10) }

// sendPull sends plain pull p.
func (r *run) sendPull(p pull) {
	if err := r.nc.PublishRequest(r.nextSubject, r.pullReply(p.id), r.pullBody(nil, p)); err != nil {
		r.flow.ended(p.id, -1)
		r.pullFailed(fmt.Errorf("sending a pull: %w", err))
	}
}

// sendCarry sends m's ack carrying pull p.
func (r *run) sendCarry(m *message, p pull) error {
	body := r.pullBody(append(make([]byte, 0, 64), "+NXT "...), p)
	return r.nc.PublishRequest(m.delivery().Reply, r.pullReply(p.id), body)
}

// probe sends probe id: m's ack again, with a reply, which the server
// answers once it processed it and every ack the connection sent to the
// consumer before.
func (r *run) probe(m *message, id uint64) {
	if err := r.nc.PublishRequest(m.delivery().Reply, r.probeReply(id), ackAck); err != nil {
		r.flow.endProbe(id)
		r.report(fmt.Errorf("natsjs: Run: consumer %q: probing acks: %w: %w", r.name, ErrNotConfirmed, err))
	}
}

// probeAcked probes the acked slots, if any, so that plain pulls can take
// them once the server confirms their acks.
func (r *run) probeAcked() {
	last := r.lastAcked.Load()
	if last == nil {
		return
	}
	if id := r.flow.probeAcked(time.Now().Add(r.cfg.settleTimeout)); id != 0 {
		r.probe(last, id)
	}
}

// pullLoop is the puller: it sends the plain pulls the flow says are due,
// and submits the runners it asks for, until the run stops.
func (r *run) pullLoop() {
	for {
		if r.stopCtx.Err() != nil {
			return
		}
		if d := time.Until(time.Unix(0, r.pauseUntil.Load())); d > 0 {
			select {
			case <-time.After(d):
			case <-r.stopCtx.Done():
				return
			}
		}
		r.submitRunners(r.flow.dueRunners())
		if r.cfg.key != nil {
			r.submitKeyed()
		}
		p, probe := r.flow.takeForPull(time.Now().Add(r.pullDeadline))
		switch {
		case p.n > 0:
			r.sendPull(p)
			continue
		case probe:
			r.probeAcked()
		}
		select {
		case <-r.flow.changed:
		case <-r.stopCtx.Done():
			return
		}
	}
}

// receive is the subscription's handler: it takes charge of a delivered
// message, or of a status ending a pull, or of a probe's answer. The
// client calls it from one goroutine, in the order the server sent.
func (r *run) receive(msg *nats.Msg) {
	status := msg.Header.Get("Status")
	if msg.Reply != "" && (status == "" || len(msg.Data) > 0) {
		r.deliver(msg)
		return
	}
	suffix, ok := strings.CutPrefix(msg.Subject, r.inbox)
	if !ok || len(suffix) < 2 {
		return
	}
	id, err := strconv.ParseUint(suffix[1:], 10, 64)
	if err != nil {
		return
	}
	switch suffix[0] {
	case 'c': // a probe's answer: the server processed the acks before it
		r.flow.endProbe(id)
	case 'p':
		r.pullStatus(id, status, msg.Header.Get("Description"), msg.Header)
	}
}

// deliver takes charge of a message a pull brought.
func (r *run) deliver(msg *nats.Msg) {
	if r.pause.Load() != 0 {
		r.pause.Store(0)
	}
	delivery, seq := ackTokens(msg.Reply)
	m := &message{msg: msg, nc: r.nc, size: msg.Size(), seq: seq}
	taken, runners := r.flow.delivered(m, delivery > 1)
	if !taken {
		// No slot for it (a pull given up on delivered late, every slot
		// taken), or the stop has handed back the rest: it goes back.
		r.handBackLate(m)
		return
	}
	r.submitRunners(runners)
}

// pullStatus takes charge of a status the server sent to pull id.
func (r *run) pullStatus(id uint64, status, desc string, hdr nats.Header) {
	// All of the pull's messages and bytes, unless the status says.
	pending, pendingBytes := headerInt(hdr, "Nats-Pending-Messages"), headerInt(hdr, "Nats-Pending-Bytes")
	lower := strings.ToLower(desc)
	switch {
	case status == "100":
		return // a heartbeat: the pull goes on
	case status == "408" && pending >= 0:
		// The pull expired: the usual end of a pull on an idle stream.
		r.flow.ended(id, pending)
		return
	case status == "409" && lower == "batch completed":
		// A pull with max_bytes got all its messages, with bytes to spare.
		r.flow.ended(id, pending)
		return
	case status == "409" && strings.Contains(lower, "exceeds maxbytes"):
		// The next message is larger than what the byte bound left.
		r.flow.tooLarge(id, pending, pendingBytes)
		return
	}
	r.flow.ended(id, pending)
	switch {
	case status == "409" && strings.Contains(lower, "consumer deleted"):
		r.lose(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, jetstream.ErrConsumerDeleted))
	case status == "409" && (strings.HasPrefix(lower, "exceeded maxrequest") || strings.Contains(lower, "push based")),
		status == "400":
		// The next pull would be refused alike.
		r.end(fmt.Errorf("natsjs: Run: consumer %q: %s %s: %w", r.name, status, desc, ErrPullRefused))
	case status == "503":
		// No responders: the consumer or its stream may be gone.
		r.pullFailed(fmt.Errorf("pull: no responders: %w", nats.ErrNoResponders))
		r.checkConsumer()
	default:
		// Exceeded MaxWaiting, Leadership Change, Server Shutdown, ...:
		// worth another pull, after a pause.
		r.pullFailed(fmt.Errorf("pull: %s %s", status, desc))
	}
}

// headerInt returns the value of header key as an int, -1 if it has none.
func headerInt(hdr nats.Header, key string) int {
	if v := hdr.Get(key); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return -1
}

// pullFailed reports a failed pull and pauses the puller: for longer each
// time, until a message arrives. A closed connection ends the run.
func (r *run) pullFailed(err error) {
	if errors.Is(err, nats.ErrConnectionClosed) {
		r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
		return
	}
	r.report(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
	pause := min(max(2*time.Duration(r.pause.Load()), 50*time.Millisecond), 2*time.Second)
	r.pause.Store(int64(pause))
	r.pauseUntil.Store(time.Now().Add(pause).UnixNano())
}

// checkConsumer asks the server, in the background, whether the consumer
// still exists, and ends the run if it does not. One check at a time, and
// none once the run has ended: the end waits for the checks under way.
func (r *run) checkConsumer() {
	if !r.checking.CompareAndSwap(false, true) {
		return
	}
	r.bgMu.Lock()
	defer r.bgMu.Unlock()
	if r.bgClosed {
		r.checking.Store(false)
		return
	}
	r.bg.Go(func() {
		defer r.checking.Store(false)
		r.refresh()
	})
}

// refresh reads the consumer's configuration again, so that a change of
// its AckWait, BackOff or MaxDeliver takes effect, and ends the run if the
// consumer or its stream is gone. Its round trip is a sample of the time
// a pull takes to come back.
func (r *run) refresh() {
	ctx, cancel := context.WithTimeout(r.checkCtx, r.cfg.settleTimeout)
	defer cancel()
	start := time.Now()
	info, err := r.cons.Info(ctx)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		r.lose(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
	case err != nil:
		if r.checkCtx.Err() == nil {
			r.report(fmt.Errorf("natsjs: Run: reading consumer %q: %w", r.name, err))
		}
	default:
		r.sampleRTT(time.Since(start))
		r.setConsumer(info.Config)
	}
}
