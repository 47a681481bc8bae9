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
// MaxBytes" if no message fitted. The flow then asks again only once more
// than that is free; if nothing is held and the bound itself is too
// small, it asks for one message, whatever its size, alone.
//
// The flow counts what the live pulls may bring as a whole, as it counts
// their messages: a delivery takes its size off, and a pull that ends
// gives back what the server says it did not use: it says so at every
// end (a 408 when it expires, a 409 "Batch Completed" when it got its
// messages with bytes to spare, a 409 when the next message was too
// large), but when its max_bytes were used to the byte, and it owes
// nothing more. Whatever that count says, it never exceeds the sum of the
// live pulls' max_bytes, to which it falls back when a pull ends without
// saying, or is given up on.
//
// A pull asks for what its messages should weigh, twice what messages
// have weighed on average, not for all the bound leaves: the next pull,
// carried by the next ack, would find nothing left while the first one
// waits for messages.

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
	}
	if f.avgSize > 0 {
		// After a pull that was too small for the next message, twice
		// as much, so that a few pulls find its size.
		room = min(room, max(2*n*f.avgSize, minPullBytes, 2*f.tooBig))
	}
	return n, room
}

// minPullBytes is the least a pull asks for, under the byte bound, however
// light the messages: a pull of a few bytes would fit no message but the
// lightest.
const minPullBytes = 64 << 10

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
	f.liveBytes += maxBytes
}

// endPullBytes records that pull p ended with pendingBytes of its
// max_bytes unused (-1: unknown). Call with mu held.
func (f *flow) endPullBytes(p *pullRecord, pendingBytes int) {
	if p.id == f.oversize {
		f.oversize = 0
	}
	if p.maxBytes == 0 {
		return
	}
	f.liveBytes -= p.maxBytes
	if pendingBytes >= 0 {
		f.owedBytes -= min(pendingBytes, f.owedBytes)
	}
	f.owedBytes = min(f.owedBytes, f.liveBytes)
}

// deliveredBytes takes a message of size bytes that a pull owed off what
// the pulls may bring. Call with mu held.
func (f *flow) deliveredBytes(size int) {
	f.owedBytes -= min(size, f.owedBytes)
	f.oversize = 0 // it is the only pull out, and its one message came
	f.tooBig = 0
	if f.avgSize == 0 {
		f.avgSize = size
	} else {
		f.avgSize += (size - f.avgSize) / 8
	}
}

// owesBytes reports whether the live pulls may bring a message of size
// bytes: one larger than what they may bring in all is late, from a pull
// given up on. Call with mu held.
func (f *flow) owesBytes(size int) bool {
	return f.maxBytes <= 0 || f.oversize != 0 || size <= f.owedBytes
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
	f.endedLocked(id, pending, pendingBytes)
}
