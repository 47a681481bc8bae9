package sched

// Weighted turns. Each queue with waiting tasks has a turn, and the next
// task comes from the queue with the lowest. A turn is a point in a
// virtual time counted in rounds: a queue of weight w that takes a turn
// moves on by 1/w of a round, so that of the queues that keep taking turns
// each goes in proportion to its weight, and none twice in a row while a
// queue of the same weight waits. This is stride scheduling, not smooth
// weighted round robin: queues of one weight that joined together sit at
// one virtual time, so a heavier queue takes its turns of a round in a
// run before them (weights 7, 1 and 1 give aaaaaaabc, where smooth
// round robin gives aaabaacaa). Ties go to the turn given first. A queue that had no waiting
// task, or that takes a turn, starts from the latest turn taken (now), so
// a queue that was idle, or passed over, gains nothing by it: with every
// weight 1 these are plain round-robin turns, each queue after every
// other.

// MaxWeight is the highest weight a queue may have.
const MaxWeight = 1000

// roundParts is how many parts a round has: every weight up to 16, and
// every divisor of it, divides it exactly; for other weights a part is
// rounded, by less than one part in 720.
const roundParts = 720720

// A Turn is a queue's place in the turns, and a task's once handed out.
type Turn struct {
	// Round and Part are the turn's virtual time: Round + Part/roundParts.
	Round int64
	Part  uint32
	// N numbers the turns in the order they were given, to break ties. It
	// wraps, and is compared as a difference: the turns it tells apart
	// were given close together.
	N uint32
}

// Before reports whether t comes before u.
func (t Turn) Before(u Turn) bool {
	switch {
	case t.Round != u.Round:
		return t.Round < u.Round
	case t.Part != u.Part:
		return t.Part < u.Part
	}
	return int32(t.N-u.N) < 0
}

// at returns t's virtual time, without its number.
func (t Turn) at() Turn { return Turn{Round: t.Round, Part: t.Part} }

// after returns the virtual time a queue of stride part parts (a whole
// round if 0) moves on to from t.
func (t Turn) after(stride uint32) Turn {
	if stride == 0 {
		return Turn{Round: t.Round + 1, Part: t.Part}
	}
	p := uint64(t.Part) + uint64(stride)
	return Turn{Round: t.Round + int64(p/roundParts), Part: uint32(p % roundParts)}
}

// strideOf returns the parts of a round a queue of weight w moves on by
// per turn; 0 stands for a whole round (weight 1).
func strideOf(w int) uint32 {
	if w <= 1 {
		return 0
	}
	return uint32((roundParts + w/2) / w)
}

// nextTurn returns the turn a queue of stride moves to: on from the
// latest turn taken, after every queue of the same weight that waits.
func (s *Scheduler[W]) nextTurn(stride uint32) Turn {
	t := s.now.after(stride)
	t.N = s.given
	s.given++
	return t
}

// SetWeight sets q's weight, 1 to MaxWeight: how many turns it takes for
// one of a queue of weight 1. It takes effect from q's next turn. Only the
// loop may call it, or its maker before the queue is used.
func (q *Queue[W]) SetWeight(w int) {
	q.stride = strideOf(min(max(w, 1), MaxWeight))
}
