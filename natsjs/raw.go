package natsjs

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A rawPath pulls on one subscription, made when the run starts, to a
// wildcard under a fresh inbox, on the connection of the JetStream context
// WithJetStream gave: each pull, and each probe, has its own reply subject
// under it (inbox.p<id>, inbox.c<id>), so that a status or an answer names
// what it ends. The server delivers messages with their own subject, so a
// message does not say which pull it was for: the slot book counts what is
// owed as a whole. The client restores the subscription after a
// reconnection; the pulls sent before it stay owed until their deadline,
// as the server may still serve them.
//
// Several pulls are out at once, and the last ack of each batch carries
// the next pull (+NXT): the server registers that pull only after it has
// processed the ack, and it processes the acks that one connection sends
// to one consumer in the order they were sent (its read loop queues them
// for the consumer as it reads them, and one goroutine of the consumer
// takes them in order). So the batch's slots go into that pull at once,
// without a round trip, and the server serves it only once it knows of
// every ack before: what it counts as delivered to this process and not
// acked stays within the bound, even if it were to read some acks and
// lose them. A plain pull takes another queue in the server, so it takes
// only slots no ack freed.
type rawPath struct {
	r           *run
	nc          *nats.Conn
	sub         *nats.Subscription
	nextSubject string // the consumer's pull subject
	inbox       string // the prefix of the reply subjects, ending in "."
	body        []byte // reused by carry, which only the acker calls
}

// newRawPath subscribes r's raw path on js's connection.
func newRawPath(r *run, js jetstream.JetStream, info *jetstream.ConsumerInfo) (*rawPath, error) {
	nc := js.Conn()
	p := &rawPath{
		r:           r,
		nc:          nc,
		nextSubject: apiPrefix(js.Options()) + "CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name,
		inbox:       nc.NewInbox() + ".",
	}
	sub, err := nc.Subscribe(p.inbox+"*", p.receive)
	if err != nil {
		return nil, fmt.Errorf("natsjs: Run: subscribing: %w", err)
	}
	// The subscription's pending messages are bounded by the slots.
	_ = sub.SetPendingLimits(-1, -1)
	p.sub = sub
	return p, nil
}

func (p *rawPath) pull(id uint64, n int) error {
	return p.nc.PublishRequest(p.nextSubject, p.pullReply(id), p.pullBody(nil, n))
}

func (p *rawPath) carry(m *message, id uint64, n int) error {
	p.body = p.pullBody(append(p.body[:0], "+NXT "...), n)
	return p.nc.PublishRequest(m.wire.Reply(), p.pullReply(id), p.body)
}

func (p *rawPath) confirm(m *message, id uint64) {
	if err := p.nc.PublishRequest(m.wire.Reply(), p.probeReply(id), ackAck); err != nil {
		p.r.probeFailed(id, fmt.Errorf("%w: %w", ErrNotConfirmed, err))
	}
}

func (p *rawPath) closed() bool { return p.nc.IsClosed() }

func (p *rawPath) close() { _ = p.sub.Unsubscribe() }

// rawPullDeadline is how long after it is sent a raw pull may still bring
// a message: its expiry, and as long again for its last messages and its
// status to arrive.
func rawPullDeadline(expires time.Duration) time.Duration { return 2*expires + time.Second }

// pullBody appends the JSON of a pull of n messages to buf.
func (p *rawPath) pullBody(buf []byte, n int) []byte {
	buf = append(buf, `{"batch":`...)
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, `,"expires":`...)
	buf = strconv.AppendInt(buf, p.r.pullExpires.Nanoseconds(), 10)
	return append(buf, '}')
}

// pullReply returns the reply subject of pull id.
func (p *rawPath) pullReply(id uint64) string { return p.inbox + "p" + strconv.FormatUint(id, 10) }

// probeReply returns the reply subject of probe id.
func (p *rawPath) probeReply(id uint64) string { return p.inbox + "c" + strconv.FormatUint(id, 10) }

// receive is the subscription's handler: it takes charge of a delivered
// message, or of a status ending a pull, or of a probe's answer. The
// client calls it from one goroutine, in the order the server sent.
func (p *rawPath) receive(msg *nats.Msg) {
	status := msg.Header.Get("Status")
	if msg.Reply != "" && (status == "" || len(msg.Data) > 0) {
		p.r.deliver(&rawMsg{msg: msg, nc: p.nc})
		return
	}
	suffix, ok := strings.CutPrefix(msg.Subject, p.inbox)
	if !ok || len(suffix) < 2 {
		return
	}
	id, err := strconv.ParseUint(suffix[1:], 10, 64)
	if err != nil {
		return
	}
	switch suffix[0] {
	case 'c': // a probe's answer: the server processed the acks before it
		p.r.slots.endProbe(id)
	case 'p':
		p.pullStatus(id, status, msg.Header.Get("Description"), msg.Header)
	}
}

// pullStatus takes charge of a status the server sent to pull id.
func (p *rawPath) pullStatus(id uint64, status, desc string, hdr nats.Header) {
	r := p.r
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
		r.consumerDeleted()
	case status == "409" && (strings.HasPrefix(lower, "exceeded maxrequest") || strings.Contains(lower, "push based")),
		status == "400":
		// The next pull would be refused alike.
		r.pullRefused(status + " " + desc)
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
