package main

import (
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatchkit/workerpool"
)

// A phase is one run of the load: on a shared queue, or with fair turns.
type phase struct {
	key   string // "shared" or "fair", for the chart's series ids
	title string
	fair  bool // each tenant on its own sub-pool
}

// phases are the two runs, in the order they run.
var phases = []phase{
	{key: "shared", title: "shared queue", fair: false},
	{key: "fair", title: "fair turns", fair: true},
}

// A result is what one phase measured.
type result struct {
	phase
	elapsed time.Duration // from the first submission until StopWait returned
	tenants []tenantResult
	samples []sample
	errs    int // submissions that failed; none should
}

// A tenantResult is one tenant's share of a result.
type tenantResult struct {
	submitted, ran int
	waits          []time.Duration // each task's wait, submission to start, sorted
	tasks          []taskTimes     // each task's, in the order they started
	lastEnd        time.Duration   // when its last task ended, from the phase's start
}

// A taskTimes says when a task was submitted, from the phase's start, and
// how long it waited to start.
type taskTimes struct{ submitted, wait time.Duration }

// A sample is the state of the pool at one instant of a phase.
type sample struct {
	at                     time.Duration // from the phase's start
	workers, busy, waiting int           // the pool's, from Pool.Status
	tenants                []count       // each tenant's
}

// A count is a tenant's tasks running and waiting at one instant.
type count struct{ busy, waiting int }

// A tally counts one tenant's tasks as they go, during a phase. The demo
// keeps its own counts so that the shared-queue phase, where no sub-pool
// tells tenants apart, can show them too; the fair-turns phase shows what
// each sub-pool's Status says.
type tally struct {
	submitted, started, done atomic.Int64
	lastEnd                  atomic.Int64 // nanoseconds from the phase's start

	mu      sync.Mutex
	tasks   []taskTimes // each started task's; guarded by mu
	submits []time.Time // each submission's time, in order; guarded by mu
}

// now returns the tally's counts, as a sub-pool's Status would: tasks
// running, waiting and done.
func (t *tally) now() (busy, waiting, done int) {
	// Read the later counts first, so that none exceeds the one before.
	done = int(t.done.Load())
	started := int(t.started.Load())
	submitted := int(t.submitted.Load())
	return started - done, submitted - started, done
}

// oldest returns how long the oldest of the tenant's waiting tasks has
// waited, or 0 if none waits. A tenant's tasks start in the order it
// submitted them, so the oldest is the first not started.
func (t *tally) oldest(now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := int(t.started.Load()); i < len(t.submits) {
		return now.Sub(t.submits[i])
	}
	return 0
}

// sortedWaits returns the waits of the tasks started so far, sorted.
func (t *tally) sortedWaits() []time.Duration {
	t.mu.Lock()
	w := make([]time.Duration, len(t.tasks))
	for i, tt := range t.tasks {
		w[i] = tt.wait
	}
	t.mu.Unlock()
	slices.Sort(w)
	return w
}

// demo runs every phase, one after the other, showing each live on out.
func demo(cfg config, out io.Writer) []result {
	res := make([]result, 0, len(phases))
	for _, ph := range phases {
		res = append(res, runPhase(cfg, ph, out))
	}
	return res
}

// runPhase runs the load once, on a new pool, and returns what it measured.
func runPhase(cfg config, ph phase, out io.Writer) result {
	ts := tenants(cfg)
	p := workerpool.New(cfg.workers)
	// Where each tenant submits: the pool itself, or its own sub-pool.
	to := make([]workerpool.Submitter, len(ts))
	subs := make([]*workerpool.Subpool, len(ts))
	for i, t := range ts {
		to[i] = p
		if ph.fair {
			subs[i] = p.Subpool(t.name, t.limit)
			to[i] = subs[i]
		}
	}
	tallies := make([]*tally, len(ts))
	for i := range tallies {
		tallies[i] = new(tally)
	}

	m := &monitor{cfg: cfg, ph: ph, p: p, subs: subs, tenants: ts, tallies: tallies, out: out}
	start := time.Now()
	m.start = start
	stop := make(chan struct{})
	var watching sync.WaitGroup
	watching.Go(func() { m.watch(stop) })

	var errs atomic.Int64
	var load sync.WaitGroup
	for i, t := range ts {
		load.Go(func() { errs.Add(int64(generate(t, to[i], tallies[i], start, cfg.duration))) })
	}
	load.Wait()
	p.StopWait() // every task accepted has run
	elapsed := time.Since(start)
	close(stop)
	watching.Wait()

	r := result{phase: ph, elapsed: elapsed, samples: m.samples, errs: int(errs.Load())}
	for _, tl := range tallies {
		r.tenants = append(r.tenants, tenantResult{
			submitted: int(tl.submitted.Load()),
			ran:       int(tl.done.Load()),
			waits:     tl.sortedWaits(),
			tasks:     tl.tasks,
			lastEnd:   time.Duration(tl.lastEnd.Load()),
		})
	}
	return r
}

// generate submits tenant t's load to s, as if from a client of its own,
// and returns how many submissions failed. A trickle submits one task
// every t.every until d has passed since start, on a fixed schedule, so a
// late tick does not shift the ones after it.
func generate(t tenant, s workerpool.Submitter, tl *tally, start time.Time, d time.Duration) (errs int) {
	submit := func() {
		now := time.Now()
		tl.mu.Lock()
		tl.submits = append(tl.submits, now)
		tl.mu.Unlock()
		tl.submitted.Add(1) // before Submit, so that started <= submitted
		if err := s.Submit(task(t, tl, start, now)); err != nil {
			tl.mu.Lock()
			tl.submits = tl.submits[:len(tl.submits)-1]
			tl.mu.Unlock()
			tl.submitted.Add(-1)
			errs++
		}
	}
	if t.every == 0 {
		time.Sleep(time.Until(start.Add(t.at)))
		for range t.flood {
			submit()
		}
		return errs
	}
	for at := time.Duration(0); at < d; at += t.every {
		time.Sleep(time.Until(start.Add(at)))
		submit()
	}
	return errs
}

// task returns one of tenant t's tasks, submitted at submitted: it records
// its wait, then sleeps for t.work, as if it waited on I/O.
func task(t tenant, tl *tally, start, submitted time.Time) func() {
	return func() {
		wait := time.Since(submitted)
		tl.started.Add(1)
		tl.mu.Lock()
		tl.tasks = append(tl.tasks, taskTimes{submitted: submitted.Sub(start), wait: wait})
		tl.mu.Unlock()
		time.Sleep(t.work)
		end := int64(time.Since(start))
		for {
			last := tl.lastEnd.Load()
			if end <= last || tl.lastEnd.CompareAndSwap(last, end) {
				break
			}
		}
		tl.done.Add(1)
	}
}

// percentile returns the p-th quantile (0 < p <= 1) of sorted, the nearest
// rank, or 0 if it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
