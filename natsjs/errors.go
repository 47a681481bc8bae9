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
	// ErrNotConfirmed says that the server did not confirm, within the
	// settle timeout (5s), that it processed an ack, a hand-back or a
	// termination. Run returns it, wrapped, when some of what its stop
	// settled was not confirmed: a message it acked may come back after
	// AckWait and be handled again; one it handed back comes back only
	// after AckWait; one on its last delivery that it could not re-publish
	// stays in its stream; one whose copy was not confirmed was handed
	// back all the same, and the copy may still be stored: its job may be
	// handled twice. The error handler is told of each message.
	ErrNotConfirmed = errors.New("natsjs: the server did not confirm the settling of a message")
	// ErrSuperseded says that a message's stream has moved on: a stream
	// with a per-subject limit (MaxMsgsPerSubject) holds a newer message of
	// its subject, or no longer holds the message. Run does not copy such
	// a message back to its subject, where the copy would push the newer
	// one out: it terminates it, and tells the error handler, wrapped in a
	// [MessageError]. [Redrive] returns it for a dead letter whose subject
	// has a newer message, and leaves the dead letter where it is.
	ErrSuperseded = errors.New("natsjs: a newer message of its subject is stored")
)

// A MessageError is a failure to settle one message, passed to the
// [WithErrorHandler] function: an ack, Nak, Term or progress message that
// could not be sent, a settling the server did not confirm, or a copy that
// could not be published (a dead letter, or a re-publication at a stop).
type MessageError struct {
	// Op is what failed: "ack", "nak", "term", "progress", "dead-letter"
	// or "republish" (a copy to the message's own subject, of a message a
	// stop handed back or whose dead letter could not be published). A
	// settling the server did not confirm has the settling's Op, and Err
	// wraps ErrNotConfirmed.
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

// A HandlerError is a handler's failure, passed to the [WithErrorHandler]
// function once [Run] has settled the message (a Stopped one, once Run has
// taken it back, to hand back with the waiting ones): each error a handler
// returned, each panic (Err is then a *workerpool.PanicError with the
// value and the stack) and each call of runtime.Goexit.
type HandlerError struct {
	// Stream and Sequence name the message: its stream and its sequence
	// in that stream. Delivery is the attempt that failed: 1 for the
	// first. It is the message's delivery count, but for a copy a stop
	// re-published, whose attempts count on from the message's (see
	// [Run]).
	Stream   string
	Sequence uint64
	Delivery uint64
	// Final says that the failure was on the consumer's last attempt
	// (MaxDeliver), or was [Permanent]: the handler does not run on the
	// message again. Run terminated it, once its dead letter was published
	// if [WithDeadLetter] says where. If the dead letter could not be
	// published, Run keeps the message, in a work-queue stream, as a copy
	// whose handler does not run, until it can be (see
	// [WithDeadLetter]); in another stream, it leaves it, and the server
	// delivers it again after AckWait, but after its last delivery.
	Final bool
	// Stopped says that the handler failed once Run was stopping and had
	// cancelled the handler's ctx: the failure is not an attempt. Run
	// hands the message back without backoff, with the messages that
	// waited, once its pulls have ended (see [Run]).
	Stopped bool
	// Err is what the handler returned, a *workerpool.PanicError, or an
	// error saying that it called runtime.Goexit.
	Err error
}

// Error returns "natsjs: handler failed on delivery <n> of message
// <stream>/<sequence>[, final | , stopped]: <cause>".
func (e *HandlerError) Error() string {
	how := ""
	switch {
	case e.Final:
		how = ", final"
	case e.Stopped:
		how = ", stopped"
	}
	return fmt.Sprintf("natsjs: handler failed on delivery %d of message %s/%d%s: %v", e.Delivery, e.Stream, e.Sequence, how, e.Err)
}

// Unwrap returns what the handler returned or panicked with.
func (e *HandlerError) Unwrap() error { return e.Err }

// Permanent wraps err, the failure of a handler, to say that retrying is
// useless: [Run] does not wait for the consumer's MaxDeliver, but
// dead-letters (see [WithDeadLetter]) and terminates the message at once.
// errors.Is and errors.As see err through it. Permanent(nil) is a
// permanent failure too, whose message is "natsjs: permanent failure".
func Permanent(err error) error { return &permanentError{err: err} }

// A permanentError is a failure wrapped by Permanent.
type permanentError struct{ err error }

func (e *permanentError) Error() string {
	if e.err == nil {
		return "natsjs: permanent failure"
	}
	return e.err.Error()
}

func (e *permanentError) Unwrap() error { return e.err }

// isPermanent reports whether err is, or wraps, a Permanent failure.
func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
