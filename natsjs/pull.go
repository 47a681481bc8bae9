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

// A run pulls on one subscription, made when it starts, to a wildcard
// under a fresh inbox: each pull, and each probe, has its own reply
// subject under it (inbox.p<id>, inbox.c<id>), so that a status or an
// answer names what it ends. The server delivers messages with their own
// subject, so a message does not say which pull it was for: the slot book
// counts what is owed as a whole. The client restores the subscription
// after a reconnection; the pulls sent before it stay owed until their
// expiry, as the server may still serve them.

// pullLoop is the puller: it sends a plain pull whenever free slots are
// available, until r.ctx is done. While messages wait for the workers it
// waits for pullAt free slots, to send fewer, larger pulls.
func (r *run) pullLoop() {
	for {
		if r.ctx.Err() != nil {
			return
		}
		if d := time.Until(time.Unix(0, r.pauseUntil.Load())); d > 0 {
			select {
			case <-time.After(d):
			case <-r.ctx.Done():
				return
			}
		}
		want := 1
		if r.waiting.Load() > 0 {
			want = r.pullAt
		}
		id, n := r.slots.takeForPull(r.maxBatch, want, time.Now().Add(r.pullDeadline()))
		if n == 0 {
			select {
			case <-r.slots.changed:
			case <-r.pullNow:
			case <-r.ctx.Done():
				return
			}
			continue
		}
		if err := r.nc.PublishRequest(r.nextSubject, r.pullReply(id), r.pullBody(nil, n)); err != nil {
			r.slots.ended(id, -1)
			r.pullFailed(fmt.Errorf("sending a pull: %w", err))
		}
	}
}

// pullDeadline is how long after it is sent a pull may still bring a
// message: its expiry, and as long again for its last messages and its
// status to arrive.
func (r *run) pullDeadline() time.Duration { return 2*r.pullExpires + time.Second }

// pullBody appends the JSON of a pull of n messages to buf.
func (r *run) pullBody(buf []byte, n int) []byte {
	buf = append(buf, `{"batch":`...)
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, `,"expires":`...)
	buf = strconv.AppendInt(buf, r.pullExpires.Nanoseconds(), 10)
	return append(buf, '}')
}

// pullReply returns the reply subject of pull id.
func (r *run) pullReply(id uint64) string { return r.inbox + "p" + strconv.FormatUint(id, 10) }

// probeReply returns the reply subject of probe id.
func (r *run) probeReply(id uint64) string { return r.inbox + "c" + strconv.FormatUint(id, 10) }

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
		r.slots.endProbe(id)
	case 'p':
		r.pullStatus(id, status, msg.Header.Get("Description"), msg.Header)
	}
}

// pullStatus takes charge of a status the server sent to pull id.
func (r *run) pullStatus(id uint64, status, desc string, hdr nats.Header) {
	pending := -1 // all of the pull's messages, unless the status says
	if v := hdr.Get("Nats-Pending-Messages"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			pending = n
		}
	}
	lower := strings.ToLower(desc)
	switch {
	case status == "100":
		return // a heartbeat: the pull goes on
	case status == "408" && pending >= 0:
		// The pull expired: the usual end of a pull on an idle stream.
		r.slots.ended(id, pending)
		return
	}
	r.slots.ended(id, pending)
	switch {
	case status == "409" && strings.Contains(lower, "consumer deleted"):
		r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, jetstream.ErrConsumerDeleted))
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

// pullFailed reports a failed pull and pauses the puller: for longer each
// time, until a message arrives.
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

// deliver takes charge of a message the server delivered.
func (r *run) deliver(msg *nats.Msg) {
	if r.pause.Load() != 0 {
		r.pause.Store(0)
	}
	if !r.slots.delivered() {
		// A message for a pull given up on, with every slot taken: it
		// goes back to the server at once.
		if err := r.nc.Publish(msg.Reply, ackNak); err != nil {
			m := &message{msg: msg, nc: r.nc}
			r.report(m.messageError("nak", err))
		}
		return
	}
	m := &message{msg: msg, nc: r.nc}
	m.task = func() { r.runTask(m) }
	r.register(m)
}

// checkConsumer asks the server, in the background, whether the consumer
// still exists, and ends the run if it does not. One check at a time.
func (r *run) checkConsumer() {
	if !r.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.checking.Store(false)
		r.refresh()
	}()
}

// refresh reads the consumer's configuration again, so that a change of
// its AckWait, BackOff or MaxDeliver takes effect, and ends the run if the
// consumer or its stream is gone.
func (r *run) refresh() {
	ctx, cancel := context.WithTimeout(r.ctx, settleTimeout)
	defer cancel()
	info, err := r.cons.Info(ctx)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
	case err != nil:
		if r.ctx.Err() == nil {
			r.report(fmt.Errorf("natsjs: Run: reading consumer %q: %w", r.name, err))
		}
	default:
		r.maxDeliver.Store(int64(info.Config.MaxDeliver))
		if r.cfg.progress == 0 {
			r.progressEvery.Store(int64(redeliveryFloor(info.Config) / 3))
		}
	}
}
