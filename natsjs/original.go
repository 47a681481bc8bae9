package natsjs

import (
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// OriginalID returns the id a handler should key its idempotency on: the
// same for a message, for every copy [Run] publishes of it (at a stop, for
// a [Snooze], for a final failure whose dead letter could not be
// published) and for its dead letter brought back by [Redrive]. It is the
// first original's Nats-Msg-Id, if its publisher set one, and else
// "<stream>:<sequence>:<time>", the first original's stream, stream
// sequence and stored time in Unix nanoseconds (a sequence alone would
// name another message once its stream is deleted and created again). It
// returns "" for a message that is neither a JetStream message nor a
// copy.
//
// A copy has a Nats-Msg-Id and a sequence of its own, so neither is a key
// for idempotency: a job handled before a stop would run again under
// another key.
func OriginalID(msg jetstream.Msg) string {
	h := msg.Headers()
	if o := h.Get(hdrOrigin); o != "" {
		// A copy, or a dead letter: the first original's id was kept.
		if id := h.Get("Natsjs-Original-Msg-Id"); id != "" {
			return id
		}
		return o
	}
	md, err := msg.Metadata()
	if from := h.Get(hdrFrom); from != "" {
		// A copy v3.1 made, before copies said their origin.
		if id := h.Get("Natsjs-Original-Msg-Id"); id != "" || err != nil {
			return id
		}
		return md.Stream + ":" + from
	}
	if id := h.Get("Nats-Msg-Id"); id != "" {
		return id
	}
	if err != nil {
		return ""
	}
	return md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10) + ":" + strconv.FormatInt(md.Timestamp.UnixNano(), 10)
}
