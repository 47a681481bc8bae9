package natsjs

// The byte bound: the messages a run holds, queued or running, and those
// its pulls may still bring, weigh at most maxBytes, but for one message
// at a time that is larger on its own.
//
// A message weighs what the server counts against a pull's max_bytes:
// its subject, ack subject, headers and payload, which is what the client
// counts as its size (nats.Msg.Size). Each pull asks for at most what the
// bound leaves (max_bytes), and the server sends no more: it ends the pull
// once the next message would go over, with a 409 "Message Size Exceeds
// MaxBytes" if it does not fit. The flow then asks again only once more
// than that is free, for that one message with twice the room; if nothing
// is held and the bound itself is too small, it asks for it alone,
// whatever its size.
//
// What the live pulls may bring is counted as the sum of their max_bytes,
// until each ends, whatever they brought meanwhile: deliveries cannot be
// told apart by pull. That counts some bytes twice, held and owed, from a
// pull's last message to its end, but never too few. So each pull must
// end with a word from the server, which it does (a 408 when it expires, a
// 409 "Batch Completed" when it got its count of messages with bytes to
// spare), but when its max_bytes were used to the byte: then the server
// ends it silently, and the flow gives up on it at its deadline (see
// sweep). So a pull asks for as many messages as fit twice over, each as
// large as the recent messages (see sized), and for one byte more than
// that: it ends with its count, and never starves the pulls after it while
// it waits for messages. A message larger than twice that ends the pull
// with a 409 instead, which the flow takes in as it takes in any message
// too large for what a pull left.

// setByteBound sets the byte bound (0: none) and the consumer's
// MaxRequestMaxBytes (0: none), which no pull's max_bytes may exceed.
func (f *flow) setByteBound(maxBytes, maxRequestBytes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maxBytes, f.maxRequestBytes = max(maxBytes, 0), max(maxRequestBytes, 0)
}

// fitBytes fits a pull of n messages to the byte bound, freed bytes of a
// message about to be acked not counted: it returns the pull's size and
// max_bytes (0: no limit), n 0 if no pull may go now. Call with mu held.
func (f *flow) fitBytes(n, freed int) (int, int) {
	if f.maxBytes <= 0 {
		return n, 0
	}
	if f.oversize != 0 {
		return 0, 0 // the pull of one message larger than the bound is out
	}
	// limit is the most one pull may ask for; room, what it may ask for
	// now.
	limit := f.maxBytes
	if f.maxRequestBytes > 0 {
		limit = min(limit, f.maxRequestBytes)
	}
	held := f.bytes - freed + f.owedBytes
	room := min(f.maxBytes-held, limit)
	switch {
	case f.tooBig >= limit:
		// The next message is larger than any pull may ask for: it
		// comes alone, once nothing else is held or owed.
		if held == 0 && f.owed == 0 {
			return 1, 0
		}
		return 0, 0
	case room <= f.tooBig:
		return 0, 0 // room <= 0, or too little for the next message
	case f.tooBig > 0:
		// The next message is larger than the last pull left: it alone,
		// with twice that, so that a few pulls find its size.
		return 1, min(room, 2*f.tooBig)
	case f.recentSize == 0:
		return n, room // no message seen yet
	}
	each := 2 * f.recentSize
	if fit := (room - 1) / each; fit < n {
		if fit == 0 {
			if held > 0 {
				return 0, 0 // wait for room: the next message may not fit
			}
			return 1, room
		}
		n = fit
	}
	return n, n*each + 1
}

// addPullBytes records that pull id may bring maxBytes (0: one message,
// whatever its size). Call with mu held.
func (f *flow) addPullBytes(id uint64, maxBytes int) {
	if f.maxBytes <= 0 {
		return
	}
	if maxBytes == 0 {
		f.oversize = id
		return
	}
	f.owedBytes += maxBytes
}

// endPullBytes records that pull p ended, or was given up on. Call with
// mu held.
func (f *flow) endPullBytes(p *pullRecord) {
	if p.id == f.oversize {
		f.oversize = 0
	}
	f.owedBytes -= p.maxBytes
}

// deliveredBytes records the delivery of a message of size bytes that a
// pull owed. Call with mu held.
func (f *flow) deliveredBytes(size int) {
	f.oversize = 0 // it is the only pull out, and its one message came
	f.tooBig = 0
	f.sized(size)
}

// sized takes in the size of a message delivered: recentSize, what a pull
// plans for each message, rises at once to a larger message and falls by
// an eighth of the way to each smaller one. Planning for the largest
// message ever seen, as v3.1 did, left a run whose byte bound fits one
// large message holding one message at a time for good after it; this
// forgets it within a few dozen messages. Call with mu held.
func (f *flow) sized(size int) {
	if size >= f.recentSize {
		f.recentSize = size
		return
	}
	f.recentSize -= (f.recentSize - size + 7) / 8
}

// owesBytes reports whether the live pulls may bring a message of size
// bytes. A pull asked for no more than the bound left, so one that would
// take the run over it is late, of a pull given up on (or the one message
// larger than the bound, alone). Call with mu held.
func (f *flow) owesBytes(size int) bool {
	return f.maxBytes <= 0 || f.oversize != 0 || f.bytes+size <= f.maxBytes
}

// overBytes reports whether a message of size bytes that no pull owed
// would take the run over its byte bound: unless it comes alone, nothing
// else held or owed. Call with mu held.
func (f *flow) overBytes(size int) bool {
	held := f.bytes + f.owedBytes
	return f.maxBytes > 0 && held > 0 && held+size > f.maxBytes
}

// tooLarge records that the server ended pull id, with pending messages
// and pendingBytes of its max_bytes left, because the next message was
// larger than that: the next pull waits until more is free.
func (f *flow) tooLarge(id uint64, pending, pendingBytes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := f.find(id); i >= 0 && !f.pulls[i].ended {
		left := pendingBytes // what the pull had left, which the message exceeds
		if left < 0 || left > f.pulls[i].maxBytes {
			left = f.pulls[i].maxBytes
		}
		f.tooBig = max(f.tooBig, left)
	}
	f.endedLocked(id, pending)
}
