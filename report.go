package workerpool

import "sync"

// Reports. The scheduler counts the tasks running, per sub-pool and per key,
// so workers tell the dispatcher when a sub-pool's task or a keyed one
// ends; and when they drop a task Stop cut off, for Stop to return it. A
// worker adds its report to Pool.reports and, if the dispatcher waits for
// one (wantEnds), wakes it; the dispatcher takes them all at once.

// A report is what a worker tells the dispatcher about a task: that it
// ended, or that the worker dropped it because Stop or a Shutdown
// deadline cut it off.
type report struct {
	kind reportKind
	handOff
}

type reportKind uint8

const (
	endedReport reportKind = iota + 1
	droppedReport
	returnedReport // a late task handed back unstarted: see requeue
)

// reports collects workers' reports for the dispatcher.
type reports struct {
	mu   sync.Mutex
	list []report
}

func (r *reports) add(x report) {
	r.mu.Lock()
	r.list = append(r.list, x)
	r.mu.Unlock()
}

// take swaps the list for buf, emptied, and returns the list.
func (r *reports) take(buf []report) []report {
	r.mu.Lock()
	got := r.list
	r.list = buf[:0]
	r.mu.Unlock()
	return got
}

// maxReuse is the most reports whose list the dispatcher keeps for reuse.
const maxReuse = 256

// collect takes the workers' reports and tells the scheduler, and reports
// whether there were any.
func (d *dispatcher) collect() bool {
	if !d.expectsReports() {
		return false
	}
	got := d.p.reports.take(d.got)
	for _, r := range got {
		if r.kind != endedReport {
			// A worker received it and did not run it: it is no
			// longer handed out, nor late.
			d.handed--
			d.cameBack(r.handOff)
		}
		if r.kind == returnedReport && !d.cut && d.cutting(r.sub) == nil {
			if c, ok := r.w.(cancelable); ok && c.gaveUp() {
				// Its submitter gave up on it meanwhile: it leaves.
				d.sched.ended(r.entry)
				continue
			}
			// Not started: it waits in limbo with those taken back.
			d.limbo = append(d.limbo, r.entry)
			continue
		}
		d.sched.ended(r.entry)
		if r.kind != endedReport && !d.dropLate(r.handOff) {
			d.drop(r.handOff)
		}
	}
	clear(got)
	d.got = got[:0]
	if cap(got) > maxReuse {
		d.got = nil // a burst of reports: let it go
	}
	if len(got) > 0 {
		d.settleLimbo()
		d.settleStops()
	}
	return len(got) > 0
}

// expectsReports reports whether a worker may have reported something: the
// end of a task whose end the scheduler must know of, or a task dropped
// late.
func (d *dispatcher) expectsReports() bool {
	return d.sched.reported > 0 || d.wants&watchLate != 0
}
