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
// jetstream.Msg. It wraps the message as the path delivered it, wire:
// jetstream's own (the fetch path) or a rawMsg (the raw path), and records
// which messages the handler settled itself, so that the acker does not
// ack them.
type message struct {
	wire  jetstream.Msg
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

// progress sends m's progress message, unless m was settled.
func (m *message) progress() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	return m.wire.InProgress()
}

// settle sends, with send, an ack of any kind for m, and records that the
// handler settled m. It returns ErrMsgAlreadyAckd if m was settled before,
// as jetstream's own messages do.
func (m *message) settle(send func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return jetstream.ErrMsgAlreadyAckd
	}
	if err := send(); err != nil {
		return err
	}
	m.closed, m.settled = true, true
	return nil
}

// close records that the run settles m now, and reports whether the
// handler had settled it already.
func (m *message) close() (settledByHandler bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return m.settled
	}
	m.closed = true
	return false
}

// messageError returns the failure of op on m, naming m's stream and
// stream sequence if its metadata says them.
func (m *message) messageError(op string, err error) *MessageError {
	me := &MessageError{Op: op, Err: err}
	if md, mdErr := m.wire.Metadata(); mdErr == nil {
		me.Stream, me.Sequence = md.Stream, md.Sequence.Stream
	}
	return me
}

// The jetstream.Msg methods.

// Metadata returns the JetStream metadata of m; see [jetstream.Msg].
func (m *message) Metadata() (*jetstream.MsgMetadata, error) { return m.wire.Metadata() }

// Data returns the payload; see [jetstream.Msg].
func (m *message) Data() []byte { return m.wire.Data() }

// Headers returns the headers; see [jetstream.Msg].
func (m *message) Headers() nats.Header { return m.wire.Headers() }

// Subject returns the subject the message was published to; see
// [jetstream.Msg].
func (m *message) Subject() string { return m.wire.Subject() }

// Reply returns the message's ack subject; see [jetstream.Msg].
func (m *message) Reply() string { return m.wire.Reply() }

// Ack acks m; see [jetstream.Msg].
func (m *message) Ack() error { return m.settle(m.wire.Ack) }

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
	return m.wire.DoubleAck(ctx)
}

// Nak asks the server to redeliver m; see [jetstream.Msg].
func (m *message) Nak() error { return m.settle(m.wire.Nak) }

// NakWithDelay asks the server to redeliver m after delay; see
// [jetstream.Msg].
func (m *message) NakWithDelay(delay time.Duration) error {
	return m.settle(func() error { return m.wire.NakWithDelay(delay) })
}

// InProgress restarts m's AckWait; see [jetstream.Msg].
func (m *message) InProgress() error { return m.progress() }

// Term tells the server never to redeliver m; see [jetstream.Msg].
func (m *message) Term() error { return m.settle(m.wire.Term) }

// TermWithReason is Term with a reason; see [jetstream.Msg].
func (m *message) TermWithReason(reason string) error {
	return m.settle(func() error { return m.wire.TermWithReason(reason) })
}

// A rawMsg is a message the raw path's subscription received, with the
// jetstream.Msg methods, which publish on the run's connection.
type rawMsg struct {
	msg *nats.Msg
	nc  *nats.Conn
}

// The bodies of the acks the server understands.
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// The jetstream.Msg methods of a rawMsg: each settling method publishes
// its ack, as jetstream's own messages do, but without their record of
// having been acked, which the message wrapping it keeps.

func (w *rawMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := w.msg.Metadata()
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

func (w *rawMsg) Data() []byte           { return w.msg.Data }
func (w *rawMsg) Headers() nats.Header   { return w.msg.Header }
func (w *rawMsg) Subject() string        { return w.msg.Subject }
func (w *rawMsg) Reply() string          { return w.msg.Reply }
func (w *rawMsg) send(body []byte) error { return w.nc.Publish(w.msg.Reply, body) }
func (w *rawMsg) Ack() error             { return w.send(ackAck) }
func (w *rawMsg) Nak() error             { return w.send(ackNak) }
func (w *rawMsg) InProgress() error      { return w.send(ackProgress) }
func (w *rawMsg) Term() error            { return w.send(ackTerm) }

func (w *rawMsg) DoubleAck(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		// As jetstream's own messages do.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, apiTimeout)
		defer cancel()
	}
	_, err := w.nc.RequestWithContext(ctx, w.msg.Reply, ackAck)
	return err
}

func (w *rawMsg) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return w.send(ackNak)
	}
	return w.send([]byte(`-NAK {"delay":` + strconv.FormatInt(delay.Nanoseconds(), 10) + `}`))
}

func (w *rawMsg) TermWithReason(reason string) error {
	if reason == "" {
		return w.send(ackTerm)
	}
	return w.send([]byte("+TERM " + reason))
}

// Both paths' messages serve as jetstream.Msg.
var (
	_ jetstream.Msg = (*message)(nil)
	_ jetstream.Msg = (*rawMsg)(nil)
)
