package workerpool

import (
	"slices"
	"time"
)

// The loop's part in rates and levels: the scheduler decides, the loop
// tells it the time and wakes when it says. Nothing here runs for a pool
// that has never been given a rate (loop.rated) or a task of a level
// above 0.

// clock tells the scheduler the time, if it needs it to answer about
// waiting tasks or about one of q's (q may be nil): the only reads of the
// clock that rates cost.
func (d *loop) clock(q *queue) {
	if d.sched.NeedsTime(q) {
		d.sched.SetNow(d.s.now())
	}
}

// pace sets the loop's one timer for when the next task a rate holds back
// may start, or stops it if none is held back (or the pool is paused or
// dropping its queue), and publishes the tasks held back. The timer is in
// the loop's select only while it is set.
func (d *loop) pace() {
	at, ok := d.sched.NextStart()
	if !ok && d.paceC == nil && d.pacedLanes == nil && !d.pacedShown {
		return // nothing held back, now or at the last look: a rate on an idle queue costs this
	}
	d.publishPaced()
	if !ok || d.paused || d.dropping {
		if d.paceC != nil {
			d.pacer.Stop()
			d.paceC = nil
		}
		return
	}
	if d.paceC != nil && at == d.paceAt {
		return
	}
	wait := time.Duration(at - d.s.now())
	if d.pacer == nil {
		d.pacer = time.NewTimer(wait)
	} else {
		d.pacer.Reset(wait)
	}
	d.paceC, d.paceAt = d.pacer.C, at
}

// publishPaced publishes how many waiting tasks a rate holds back, for
// the pool's Status and each sub-pool's.
func (d *loop) publishPaced() {
	n := d.sched.PacedAll()
	d.s.stats.paced.Store(int64(n))
	d.pacedShown = n > 0
	var lanes []*lane
	for _, q := range d.sched.Queues() {
		if l, ok := q.Owner.(*lane); ok {
			if n := d.sched.Paced(q); n > 0 {
				l.stats.paced.Store(int64(n))
				lanes = append(lanes, l)
			}
		}
	}
	for _, l := range d.pacedLanes {
		if !slices.Contains(lanes, l) {
			l.stats.paced.Store(0)
		}
	}
	d.pacedLanes = lanes
}

// setRate sets the rate r asks for: of the pool (every task), of a
// sub-pool's queue, or of each key of a queue. The tasks it applies to
// that wait in the outbox, handed out without a token, come back first,
// to start as the rate allows: no task starts unpaced once SetRate
// returns.
func (d *loop) setRate(r *request) {
	d.rated = true
	d.sched.SetNow(d.s.now())
	q := d.s.own
	if r.lane != nil {
		q = r.lane.queue
	}
	switch {
	case r.keys:
		d.takeBack(func(e entry) bool { return e.Queue == q && e.Key != nil })
		d.sched.SetKeyRate(q, r.rate)
	case r.lane != nil:
		d.takeBack(func(e entry) bool { return e.Queue == q })
		d.sched.SetQueueRate(q, r.rate)
	default:
		d.takeBack(nil)
		d.sched.SetRate(r.rate)
	}
	d.fill()
	d.pace()
}

// makeWay takes back from the outbox the tasks of e's queue of a lower
// level than e, a task just accepted, and every task behind them: e goes
// before them, as a new queue's turn does, behind at most the tasks
// workers took meanwhile.
func (d *loop) makeWay(e entry) {
	d.takeBack(func(x entry) bool { return x.Queue == e.Queue && x.Level < e.Level })
}
