package sched

// A ring is a first-in, first-out queue that can also take items back at
// its front. Its buffer starts at one slot, doubles as it fills and halves
// when less than a quarter full, so a queue of one task holds one slot.
// gammazero/deque's smallest buffer holds 16, and the scheduler keeps a
// queue per sub-pool and per busy key: a quiet tenant with one task would
// hold 192 bytes of it.
type ring[T any] struct {
	buf  []T // len is 0 or a power of two
	head int // index of the first item
	n    int // number of items
}

func (r *ring[T]) len() int { return r.n }

// at returns the i-th item from the front.
func (r *ring[T]) at(i int) T { return r.buf[(r.head+i)&(len(r.buf)-1)] }

// set replaces the i-th item from the front.
func (r *ring[T]) set(i int, x T) { r.buf[(r.head+i)&(len(r.buf)-1)] = x }

func (r *ring[T]) front() T { return r.buf[r.head] }

func (r *ring[T]) pushBack(x T) {
	r.grow()
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = x
	r.n++
}

func (r *ring[T]) pushFront(x T) {
	r.grow()
	r.head = (r.head - 1) & (len(r.buf) - 1)
	r.buf[r.head] = x
	r.n++
}

// popFront removes the first item, which must exist, and returns it.
func (r *ring[T]) popFront() T {
	x := r.buf[r.head]
	var zero T
	r.buf[r.head] = zero // the ring keeps no closure it no longer holds
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n < len(r.buf)/4 {
		// Below a quarter, not at it: a queue that goes back and forth
		// between a few tasks does not reallocate each time.
		r.resize(len(r.buf) / 2)
	}
	return x
}

func (r *ring[T]) grow() {
	switch {
	case len(r.buf) == 0:
		r.buf = make([]T, 1)
	case r.n == len(r.buf):
		r.resize(2 * len(r.buf))
	}
}

func (r *ring[T]) resize(size int) {
	buf := make([]T, size)
	for i := range r.n {
		buf[i] = r.at(i)
	}
	r.buf, r.head = buf, 0
}

// A rising is a queue of numbers that never fall from one to the next: the
// seqs of a queue's tasks, or when they were accepted. It keeps each as its
// gap from the one before, in 4 bytes; a gap too wide for them (over four
// billion tasks, or four seconds) is kept whole, in far. So a task costs 4
// bytes however its queue's tasks and others' interleave.
type rising struct {
	gaps ring[uint32] // the first's is 0, or farGap
	far  ring[uint64] // the numbers whose gap is farGap, in order
	// head is the first number, last the last one, while there are any.
	head, last uint64
}

// farGap marks a number kept whole, in far.
const farGap = ^uint32(0)

func (r *rising) len() int { return r.gaps.len() }

// first returns the first number, or 0 if there is none.
func (r *rising) first() uint64 {
	if r.gaps.len() == 0 {
		return 0
	}
	return r.head
}

// pushBack adds n, at least the last number, behind the others.
func (r *rising) pushBack(n uint64) {
	switch {
	case r.gaps.len() == 0:
		r.gaps.pushBack(0)
		r.head = n
	case n-r.last >= uint64(farGap):
		r.gaps.pushBack(farGap)
		r.far.pushBack(n)
	default:
		r.gaps.pushBack(uint32(n - r.last))
	}
	r.last = n
}

// pushFront adds n, at most the first number, in front of the others.
func (r *rising) pushFront(n uint64) {
	if r.gaps.len() == 0 {
		r.pushBack(n)
		return
	}
	// The first number's gap, unused while it was first, is now from n.
	if r.gaps.front() != farGap {
		if r.head-n >= uint64(farGap) {
			r.gaps.set(0, farGap)
			r.far.pushFront(r.head)
		} else {
			r.gaps.set(0, uint32(r.head-n))
		}
	}
	r.gaps.pushFront(0)
	r.head = n
}

// popFront removes the first number.
func (r *rising) popFront() {
	if r.gaps.popFront() == farGap {
		r.far.popFront()
	}
	if r.gaps.len() == 0 {
		return
	}
	if g := r.gaps.front(); g == farGap {
		r.head = r.far.front()
	} else {
		r.head += uint64(g)
	}
}
