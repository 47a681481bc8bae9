package natsjs

import (
	"errors"
	"fmt"
	"strconv"
)

// Errors [Run] returns, or passes to the [WithErrorHandler] function,
// wrapped with what failed. Test for them with [errors.Is]. Run also
// returns errors that wrap jetstream.ErrInvalidOption (an invalid option),
// jetstream.ErrConsumerDeleted, jetstream.ErrConsumerNotFound,
// jetstream.ErrStreamNotFound, nats.ErrConnectionClosed and
// workerpool.ErrStopped.
var (
	// ErrInvalidConsumer is returned by Run, before it takes a message,
	// for a consumer it cannot serve: not a pull consumer, acks not
	// explicit, or limits no pull can meet.
	ErrInvalidConsumer = errors.New("natsjs: the consumer's configuration does not allow Run")
	// ErrPullRefused ends Run when the server refuses a pull for a reason
	// it would give again for every later pull, such as a consumer whose
	// MaxRequestExpires or MaxRequestBatch was lowered while Run ran.
	ErrPullRefused = errors.New("natsjs: the server refused a pull")
	// ErrNotConfirmed is passed to the error handler when the server did
	// not confirm, within the settle timeout, that it processed an ack.
	// The message may come back after AckWait and be handled again.
	ErrNotConfirmed = errors.New("natsjs: the server did not confirm the ack")
)

// A MessageError is a failure to settle one message, passed to the
// [WithErrorHandler] function: a Nak, Term or progress message that could
// not be sent, an ack the server did not confirm, or a dead-letter copy
// that could not be published.
type MessageError struct {
	// Op is what failed: "ack", "confirm ack", "nak", "term", "progress"
	// or "dead-letter".
	Op string
	// Stream and Sequence name the message: its stream and its sequence
	// in that stream.
	Stream   string
	Sequence uint64
	// Err is the cause.
	Err error
}

// Error returns "natsjs: <op> of message <stream>/<sequence>: <cause>".
func (e *MessageError) Error() string {
	return fmt.Sprintf("natsjs: %s of message %s/%s: %v", e.Op, e.Stream, strconv.FormatUint(e.Sequence, 10), e.Err)
}

// Unwrap returns the cause.
func (e *MessageError) Unwrap() error { return e.Err }
