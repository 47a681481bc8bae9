package natsjs

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A message is one message the run holds. Its handler gets it as its
// jetstream.Msg: the run's subscription delivers a *nats.Msg, and this
// type gives it the JetStream methods, and records which messages the
// handler settled itself, so that the acker does not ack them.
type message struct {
	msg   *nats.Msg
	nc    *nats.Conn
	task  func() // its task on the pool: runTask(m)
	stage stage  // guarded by run.mu

	// mu orders the watcher's progress messages against the settling of
	// the message: once closed is set, no progress message is sent, so
	// that none can follow a Nak on the connection and reset the delay
	// the Nak asked for. settled says that the handler settled it itself.
	mu      sync.Mutex
	closed  bool
	settled bool
}

// stage is where a held message is.
type stage int

const (
	waiting    stage = iota // registered; its task has not started
	started                 // its handler is running or it is being settled
	handedBack              // handed back by a stop; its task does nothing
)

// The bodies of the acks the server understands.
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// progress sends m's progress message, unless m was settled.
func (m *message) progress() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	return m.nc.Publish(m.msg.Reply, ackProgress)
}

// settle sends body, an ack of any kind, for m, and records that m is
// settled: by its handler if byHandler. It returns ErrMsgAlreadyAckd if m
// was settled before, as jetstream's own messages do.
func (m *message) settle(body []byte, byHandler bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return jetstream.ErrMsgAlreadyAckd
	}
	if err := m.nc.Publish(m.msg.Reply, body); err != nil {
		return err
	}
	m.closed, m.settled = true, byHandler
	return nil
}

// close records that the run settles m now, with the acker's ack, and
// reports whether the handler had settled it already.
func (m *message) close() (settledByHandler bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return m.settled
	}
	m.closed = true
	return false
}

// sequence returns m's stream and stream sequence, for an error; empty
// and 0 if its reply subject does not say.
func (m *message) sequence() (string, uint64) {
	md, err := m.msg.Metadata()
	if err != nil {
		return "", 0
	}
	return md.Stream, md.Sequence.Stream
}

// messageError returns the failure of op on m.
func (m *message) messageError(op string, err error) *MessageError {
	stream, seq := m.sequence()
	return &MessageError{Op: op, Stream: stream, Sequence: seq, Err: err}
}

// The jetstream.Msg methods.

// Metadata returns the JetStream metadata of m; see [jetstream.Msg].
func (m *message) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.msg.Metadata()
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

// Data returns the payload; see [jetstream.Msg].
func (m *message) Data() []byte { return m.msg.Data }

// Headers returns the headers; see [jetstream.Msg].
func (m *message) Headers() nats.Header { return m.msg.Header }

// Subject returns the subject the message was published to; see
// [jetstream.Msg].
func (m *message) Subject() string { return m.msg.Subject }

// Reply returns the message's ack subject; see [jetstream.Msg].
func (m *message) Reply() string { return m.msg.Reply }

// Ack acks m; see [jetstream.Msg].
func (m *message) Ack() error { return m.settle(ackAck, true) }

// DoubleAck acks m and waits for the server to confirm; see
// [jetstream.Msg].
func (m *message) DoubleAck(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return jetstream.ErrMsgAlreadyAckd
	}
	m.closed, m.settled = true, true
	m.mu.Unlock()
	_, err := m.nc.RequestWithContext(ctx, m.msg.Reply, ackAck)
	return err
}

// Nak asks the server to redeliver m; see [jetstream.Msg].
func (m *message) Nak() error { return m.settle(ackNak, true) }

// NakWithDelay asks the server to redeliver m after delay; see
// [jetstream.Msg].
func (m *message) NakWithDelay(delay time.Duration) error {
	return m.settle(nakWithDelay(delay), true)
}

// InProgress restarts m's AckWait; see [jetstream.Msg].
func (m *message) InProgress() error { return m.progress() }

// Term tells the server never to redeliver m; see [jetstream.Msg].
func (m *message) Term() error { return m.settle(ackTerm, true) }

// TermWithReason is Term with a reason; see [jetstream.Msg].
func (m *message) TermWithReason(reason string) error {
	return m.settle(termWithReason(reason), true)
}

// nakWithDelay returns the body of a Nak that asks for delay.
func nakWithDelay(delay time.Duration) []byte {
	if delay <= 0 {
		return ackNak
	}
	return []byte(`-NAK {"delay":` + strconv.FormatInt(delay.Nanoseconds(), 10) + `}`)
}

// termWithReason returns the body of a Term with reason.
func termWithReason(reason string) []byte {
	if reason == "" {
		return ackTerm
	}
	return []byte("+TERM " + reason)
}

// The handler gets a *message as its jetstream.Msg.
var _ jetstream.Msg = (*message)(nil)
