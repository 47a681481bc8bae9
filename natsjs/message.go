package natsjs

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A message is one message the run holds, as its subscription received
// it. It is the handler's jetstream.Msg: its settling methods publish on
// the run's connection, as jetstream's own messages do, and record that
// the handler settled it, so that the run does not settle it again.
type message struct {
	msg  *nats.Msg
	nc   *nats.Conn
	size int    // msg.Size(): what the server counts against a pull's max_bytes
	seq  uint64 // its stream sequence, as its ack subject says it; 0 if it says none
	n    uint64 // its place in the order the run received messages; guarded by flow.mu
	key  string // its key, with key order; guarded by flow.mu

	// latest is the server's latest delivery of the message, once the
	// server delivered it again while the run had it in charge (see
	// adopt); nil while msg is. Its ack subject, which says the server's
	// count of deliveries, is the one the run settles the message on and
	// sends its progress to.
	latest atomic.Pointer[nats.Msg]

	// mu orders the watcher's progress messages against the settling of
	// the message: once sealed is set, no progress message is sent, so
	// that none can follow a Nak on the connection and reset the delay
	// the Nak asked for. closed says that the run settles it, or the
	// handler did (settled): the handler may settle it no more. A message
	// is closed and sealed together, but for one whose dead letter or
	// copy is published before its settling: the server must not
	// redeliver it meanwhile, however long that takes, so it is sealed
	// only as its settling goes out (see run.send).
	mu      sync.Mutex
	closed  bool
	settled bool
	sealed  bool
}

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
	if m.sealed {
		return nil
	}
	return m.send(ackProgress)
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
	m.closed, m.settled, m.sealed = true, true, true
	return nil
}

// close records that the run settles m now, and sends no more progress
// for it. It reports whether the handler had settled m already.
func (m *message) close() (settledByHandler bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sealed = true
	if m.closed {
		return m.settled
	}
	m.closed = true
	return false
}

// hold records that the run settles m, later: the handler may settle it
// no more, but progress goes on until seal. It reports whether the
// handler had settled m already.
func (m *message) hold() (settledByHandler bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return m.settled
	}
	m.closed = true
	return false
}

// seal sends no more progress for m, which the run is about to settle.
func (m *message) seal() {
	m.mu.Lock()
	m.sealed = true
	m.mu.Unlock()
}

// adopt makes msg, a delivery of m that the server made while the run had
// m in charge, m's latest delivery, unless m's settling went out (m is
// sealed): then it returns false, and msg is a message of its own.
//
// The run then settles m, and sends its progress, on msg's ack subject.
// nats-server (2.15.2, server/consumer.go) keeps one pending entry per
// stream sequence, which a redelivery moves to its own delivery sequence
// and count: an ack, a Term or a progress message on any delivery's ack
// subject finds the entry by the stream sequence (processAckMsg,
// progressUpdate), but a Nak on an earlier delivery's is dropped once the
// ack floor has passed that delivery's sequence (processNak), and the
// server's count of deliveries, which decides whether a Nak would strand
// the message on its last delivery, is the latest one's.
func (m *message) adopt(msg *nats.Msg) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sealed {
		return false
	}
	m.latest.Store(msg)
	return true
}

// delivery returns the server's latest delivery of m, whose ack subject
// the run settles m on.
func (m *message) delivery() *nats.Msg {
	if d := m.latest.Load(); d != nil {
		return d
	}
	return m.msg
}

// send publishes an ack body to m's ack subject.
func (m *message) send(body []byte) error { return m.nc.Publish(m.delivery().Reply, body) }

// info returns m's stream, stream sequence, delivery count and stored
// time, as its ack subject says them; zeros if it says nothing.
func (m *message) info() (stream string, seq, delivery uint64, ts int64) {
	md, err := m.delivery().Metadata()
	if err != nil {
		return "", 0, 0, 0
	}
	return md.Stream, md.Sequence.Stream, md.NumDelivered, md.Timestamp.UnixNano()
}

// The headers of the copies Run publishes of a message to its own subject
// (see republish.go), which it reads when a copy comes back.
const (
	// hdrAttempts is the number of attempts the message had used when the
	// copy was published: its handler's failures (and crashes), not the
	// deliveries a stop handed back.
	hdrAttempts = "Natsjs-Attempts"
	// hdrFinal is the cause of a failure that was final, on a copy
	// published because its dead letter could not be: its handler does
	// not run again.
	hdrFinal = "Natsjs-Final-Error"
	// hdrFrom is the stream sequence of the first original of a copy.
	hdrFrom = "Natsjs-Republished-From"
	// hdrNotBefore, on a delayed copy (a Snooze, or a failure that fell
	// on the server's last delivery of a delayed copy), is when its next
	// attempt may start, in RFC 3339 with nanoseconds. The copy's first
	// delivery is its wait, never an attempt: Run Naks it with the delay
	// left, or at once if none is.
	hdrNotBefore = "Natsjs-Not-Before"
	// hdrOrigin names the first original of a copy, dead letters
	// included: its stream, stream sequence and stored time in Unix
	// nanoseconds, "<stream>:<sequence>:<time>". The ids Run derives for
	// a message (its dead letter's, OriginalID's) are the same for every
	// copy of it.
	hdrOrigin = "Natsjs-Origin"
)

// origin returns m's first original, as hdrOrigin says it: m's own
// stream, sequence and time, unless m is a copy.
func (m *message) origin() string {
	if m.msg.Header != nil {
		if o := m.msg.Header.Get(hdrOrigin); o != "" {
			return o
		}
	}
	stream, seq, _, ts := m.info()
	return stream + ":" + strconv.FormatUint(seq, 10) + ":" + strconv.FormatInt(ts, 10)
}

// attemptsBefore returns the attempts m had used before this copy of it
// was published; 0 for a message Run did not copy.
func (m *message) attemptsBefore() uint64 {
	if m.msg.Header == nil {
		return 0
	}
	n, _ := strconv.ParseUint(m.msg.Header.Get(hdrAttempts), 10, 64)
	return n
}

// notBefore returns when the next attempt of m, a delayed copy, may
// start; false if m is no delayed copy.
func (m *message) notBefore() (time.Time, bool) {
	if m.msg.Header == nil {
		return time.Time{}, false
	}
	v := m.msg.Header.Get(hdrNotBefore)
	if v == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// attemptsUsed returns the attempts m had used before its delivery
// numbered delivery: those its copy carries, and its deliveries before,
// but for the wait of a delayed copy, its first delivery.
func (m *message) attemptsUsed(delivery uint64) uint64 {
	n := m.attemptsBefore() + max(delivery, 1) - 1
	if _, delayed := m.notBefore(); delayed && delivery >= 2 {
		n--
	}
	return n
}

// finalError returns the cause of the final failure of a copy published
// because its dead letter could not be, and false for any other message.
func (m *message) finalError() (string, bool) {
	if m.msg.Header == nil {
		return "", false
	}
	vs, ok := m.msg.Header[hdrFinal]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// messageError returns the failure of op on m, naming m's stream and
// stream sequence if its metadata says them.
func (m *message) messageError(op string, err error) *MessageError {
	stream, seq, _, _ := m.info()
	return &MessageError{Op: op, Stream: stream, Sequence: seq, Err: err}
}

// The jetstream.Msg methods.

// Metadata returns the JetStream metadata of m, of the server's latest
// delivery of it; see [jetstream.Msg].
func (m *message) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.delivery().Metadata()
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

// Reply returns the ack subject of the server's latest delivery of m; see
// [jetstream.Msg].
func (m *message) Reply() string { return m.delivery().Reply }

// Ack acks m; see [jetstream.Msg].
func (m *message) Ack() error { return m.settle(func() error { return m.send(ackAck) }) }

// DoubleAck acks m and waits for the server to confirm; see
// [jetstream.Msg]. A ctx without a deadline gets one of 5s, as
// jetstream's default API timeout gives its own messages.
func (m *message) DoubleAck(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return jetstream.ErrMsgAlreadyAckd
	}
	m.closed, m.settled, m.sealed = true, true, true
	m.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, apiTimeout)
		defer cancel()
	}
	_, err := m.nc.RequestWithContext(ctx, m.delivery().Reply, ackAck)
	return err
}

// Nak asks the server to redeliver m; see [jetstream.Msg].
func (m *message) Nak() error { return m.settle(func() error { return m.send(ackNak) }) }

// NakWithDelay asks the server to redeliver m after delay; see
// [jetstream.Msg].
func (m *message) NakWithDelay(delay time.Duration) error {
	return m.settle(func() error { return m.send(nakBody(delay)) })
}

// InProgress restarts m's AckWait; see [jetstream.Msg].
func (m *message) InProgress() error { return m.progress() }

// Term tells the server never to redeliver m; see [jetstream.Msg].
func (m *message) Term() error { return m.settle(func() error { return m.send(ackTerm) }) }

// TermWithReason is Term with a reason; see [jetstream.Msg].
func (m *message) TermWithReason(reason string) error {
	return m.settle(func() error { return m.send(termBody(reason)) })
}

// nakBody returns the body of a Nak that asks for redelivery after delay;
// at once if delay is not positive.
func nakBody(delay time.Duration) []byte {
	if delay <= 0 {
		return ackNak
	}
	return nakDelayBody(delay)
}

// nakDelayBody returns the body of a Nak with delay, whatever its sign:
// without a consumer BackOff, the server redelivers the message delay from
// now (at once if delay is not positive); with one, see failedNak.
func nakDelayBody(delay time.Duration) []byte {
	return []byte(`-NAK {"delay":` + strconv.FormatInt(delay.Nanoseconds(), 10) + `}`)
}

// termBody returns the body of a Term with reason.
func termBody(reason string) []byte {
	if reason == "" {
		return ackTerm
	}
	return []byte("+TERM " + reason)
}

// ackTokens returns the delivery count and the stream sequence that
// reply, an ack subject, says, without allocating: the delivery count
// tells a redelivery, and the stream sequence which message it is, for
// every message delivered; zeros if reply is no ack subject. The server
// writes them in one of two forms, as jetstream's own parser reads them:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<time>.<pending>,
// or, with a domain and an account hash after $JS.ACK and a token of its
// own after pending, at least 11 tokens.
func ackTokens(reply string) (delivery, seq uint64) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return 0, 0
	}
	skip := 0 // the tokens before the delivery count
	switch n := strings.Count(rest, ".") + 1; {
	case n == 7:
		skip = 2
	case n >= 9:
		skip = 4
	default:
		return 0, 0
	}
	for range skip {
		_, rest, _ = strings.Cut(rest, ".")
	}
	d, rest, _ := strings.Cut(rest, ".")
	s, _, _ := strings.Cut(rest, ".")
	return parseDecimal(d), parseDecimal(s)
}

// parseDecimal returns the number s writes in decimal digits; 0 if s is
// empty or has another character.
func parseDecimal(s string) uint64 {
	var n uint64
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

var _ jetstream.Msg = (*message)(nil)
