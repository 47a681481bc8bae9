// Package prom exports a [workerpool.Pool] to Prometheus: its counters and
// gauges, each sub-pool's, and, if the pool times its tasks, histograms of
// how long they waited and ran.
//
//	p := workerpool.New(8, workerpool.WithTaskTimings())
//	prometheus.MustRegister(prom.NewCollector("jobs", p))
//
// The collector reads [workerpool.Pool.Status] and each sub-pool's
// [workerpool.Subpool.Status] at every scrape, and keeps nothing between
// scrapes: a sub-pool made after registration appears at the next scrape.
// A scrape reads atomics and copies the list of sub-pools under a lock
// that only [workerpool.Pool.Subpool] also takes: it never waits for the
// dispatcher, nor the dispatcher for it.
//
// # Metrics
//
// Every series has the constant label pool, the name given to
// [NewCollector], so that several pools can share a registry. For the
// pool:
//
//	workerpool_tasks_submitted_total  counter    Status.Submitted
//	workerpool_tasks_completed_total  counter    Status.Completed
//	workerpool_tasks_panicked_total   counter    Status.Panicked
//	workerpool_tasks_rejected_total   counter    Status.Rejected
//	workerpool_tasks_abandoned_total  counter    Status.Abandoned
//	workerpool_tasks_canceled_total   counter    Status.Canceled
//	workerpool_tasks_running          gauge      Status.Busy
//	workerpool_tasks_waiting          gauge      Status.Waiting
//	workerpool_tasks_paced            gauge      Status.Paced
//	workerpool_workers                gauge      Status.Workers
//	workerpool_max_workers            gauge      Status.MaxWorkers
//	workerpool_task_wait_seconds      histogram  Status.Wait
//	workerpool_task_run_seconds       histogram  Status.Run
//
// For each sub-pool, with the label subpool, its name: the same counters
// and gauges named workerpool_subpool_..., where
// workerpool_subpool_max_workers is its limit; there is no
// workerpool_subpool_workers, as a sub-pool's tasks run on the pool's
// workers. The pool's counters and gauges include its sub-pools' tasks.
//
// # Sub-pools that share a name
//
// A sub-pool's name is only a label, and several may share one; Prometheus
// accepts one series per label set. The sub-pools of one name make one
// series, which sums theirs: their counters, running and waiting tasks,
// histograms and limits. A stopped sub-pool leaves the metrics, as it
// leaves [workerpool.Pool.Subpools]: the series of its name then sums the
// others of its name, or goes, and its counters fall back, which
// Prometheus's rate() reads as a counter reset. The pool's own counters
// keep counting its tasks. A name that is not valid UTF-8 is exported with
// U+FFFD for its invalid bytes, and shares the series of any other name
// that becomes the same.
//
// # Histograms
//
// With [workerpool.WithTaskTimings] or [workerpool.WithTaskObserver], the
// collector exports the histograms workerpool_task_wait_seconds and
// workerpool_task_run_seconds, and each sub-pool's
// workerpool_subpool_task_wait_seconds and
// workerpool_subpool_task_run_seconds, with the buckets of
// [workerpool.TimingBounds], from a microsecond to five minutes, in
// seconds, from the first scrape on, at zero until a task is timed.
// Without timings ([workerpool.Status] says whether: Timed) it exports
// none. Once a [workerpool.Level] was made, it exports the waits by level
// too, as workerpool_task_level_wait_seconds and
// workerpool_subpool_task_level_wait_seconds, with the label level
// ([workerpool.Status] LevelWait).
package prom

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchkit/workerpool"
)

// NewCollector returns a collector of p's metrics, and its sub-pools',
// labeled pool=name: register it with a [prometheus.Registerer]. Two
// collectors of one name in one registry collide, and the second's
// registration fails, as it does if name is not valid UTF-8.
//
// NewCollector panics if p is nil.
func NewCollector(name string, p *workerpool.Pool) prometheus.Collector {
	if p == nil {
		panic("prom: NewCollector: the pool is nil")
	}
	constant := prometheus.Labels{"pool": name}
	return &collector{
		pool: p,
		own:  newDescs("workerpool_", "pool", nil, constant),
		sub:  newDescs("workerpool_subpool_", "sub-pool", []string{"subpool"}, constant),
	}
}

// collector exports a pool's Status and its sub-pools'. It keeps nothing
// but the pool and the descriptions, so it may collect concurrently.
type collector struct {
	pool     *workerpool.Pool
	own, sub descs
}

// descs describes the metrics of the pool, or of its sub-pools.
type descs struct {
	submitted, completed, panicked, rejected, abandoned, canceled *prometheus.Desc
	running, waiting, paced, maxWorkers                           *prometheus.Desc
	workers                                                       *prometheus.Desc // nil for sub-pools
	wait, run, levelWait                                          *prometheus.Desc
}

// newDescs returns the descriptions of the metrics named prefix+..., of
// a pool or a sub-pool as what says.
func newDescs(prefix, what string, variable []string, constant prometheus.Labels) descs {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prefix+name, help, variable, constant)
	}
	d := descs{
		submitted:  desc("tasks_submitted_total", "Tasks the "+what+" accepted."),
		completed:  desc("tasks_completed_total", "Tasks that finished running, panicked ones included."),
		panicked:   desc("tasks_panicked_total", "Tasks that panicked."),
		rejected:   desc("tasks_rejected_total", "Submissions refused because the queue was full."),
		abandoned:  desc("tasks_abandoned_total", "Accepted tasks dropped by a stop before they started."),
		canceled:   desc("tasks_canceled_total", "Accepted tasks that never started because their submitters gave up on them."),
		running:    desc("tasks_running", "Tasks running now."),
		waiting:    desc("tasks_waiting", "Tasks waiting to start."),
		paced:      desc("tasks_paced", "Tasks waiting that a rate holds back."),
		maxWorkers: desc("max_workers", "The limit on the "+what+"'s tasks running at once."),
		wait:       desc("task_wait_seconds", "How long tasks waited, from when they were accepted to when they started."),
		run:        desc("task_run_seconds", "How long tasks ran."),
		levelWait: prometheus.NewDesc(prefix+"task_level_wait_seconds", "How long tasks of each priority level waited.",
			append(slices.Clone(variable), "level"), constant),
	}
	if variable == nil {
		d.workers = desc("workers", "Worker goroutines.")
	}
	return d
}

// Describe sends the descriptions of every metric the collector may
// export.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []descs{c.own, c.sub} {
		for _, desc := range []*prometheus.Desc{
			d.submitted, d.completed, d.panicked, d.rejected, d.abandoned, d.canceled,
			d.running, d.waiting, d.paced, d.maxWorkers, d.workers, d.wait, d.run, d.levelWait,
		} {
			if desc != nil {
				ch <- desc
			}
		}
	}
}

// Collect sends the pool's metrics, then each sub-pool name's, in the
// order the first sub-pool of each name was made.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Status()
	c.own.collect(ch, st, st.Timed)
	for _, g := range groupByName(c.pool.Subpools()) {
		c.sub.collect(ch, g.status, st.Timed, g.name)
	}
}

// collect sends the metrics of st, with the histograms if timed, labeled
// with the values of d's variable labels.
func (d *descs) collect(ch chan<- prometheus.Metric, st workerpool.Status, timed bool, labels ...string) {
	counter := func(desc *prometheus.Desc, n uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n), labels...)
	}
	gauge := func(desc *prometheus.Desc, n int) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), labels...)
	}
	counter(d.submitted, st.Submitted)
	counter(d.completed, st.Completed)
	counter(d.panicked, st.Panicked)
	counter(d.rejected, st.Rejected)
	counter(d.abandoned, st.Abandoned)
	counter(d.canceled, st.Canceled)
	gauge(d.running, st.Busy)
	gauge(d.waiting, st.Waiting)
	gauge(d.paced, st.Paced)
	gauge(d.maxWorkers, st.MaxWorkers)
	if d.workers != nil {
		gauge(d.workers, st.Workers)
	}
	if timed {
		ch <- histogram(d.wait, st.Wait, labels)
		ch <- histogram(d.run, st.Run, labels)
		for _, level := range slices.Sorted(maps.Keys(st.LevelWait)) {
			ch <- histogram(d.levelWait, st.LevelWait[level], append(slices.Clone(labels), strconv.Itoa(level)))
		}
	}
}

// boundsInSeconds are workerpool.TimingBounds in seconds, the histograms'
// upper bounds.
var boundsInSeconds = func() (b [len(workerpool.TimingBounds)]float64) {
	for i, d := range workerpool.TimingBounds {
		b[i] = d.Seconds()
	}
	return b
}()

// histogram returns t as a Prometheus histogram: its buckets made
// cumulative, its count theirs (which t.Count is).
func histogram(desc *prometheus.Desc, t workerpool.Timing, labels []string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(boundsInSeconds))
	var n uint64
	for i, le := range boundsInSeconds {
		n += t.Buckets[i]
		buckets[le] = n
	}
	n += t.Buckets[len(boundsInSeconds)] // above every bound: +Inf only
	return prometheus.MustNewConstHistogram(desc, n, t.Total.Seconds(), buckets, labels...)
}

// A named is the Status of the sub-pools of one name, summed.
type named struct {
	name   string
	status workerpool.Status
}

// groupByName sums the Status of the sub-pools of each name, in the order
// the first of each name was made.
func groupByName(subs []*workerpool.Subpool) []named {
	var groups []named
	index := make(map[string]int, len(subs))
	for _, s := range subs {
		name := strings.ToValidUTF8(s.Name(), "\uFFFD") // else the label would fail the scrape
		st := s.Status()
		i, ok := index[name]
		if !ok {
			i = len(groups)
			index[name] = i
			groups = append(groups, named{name: name})
		}
		add(&groups[i].status, st)
	}
	return groups
}

// add adds to sum the tasks and limit of a sub-pool's Status st.
func add(sum *workerpool.Status, st workerpool.Status) {
	sum.Submitted += st.Submitted
	sum.Completed += st.Completed
	sum.Panicked += st.Panicked
	sum.Rejected += st.Rejected
	sum.Abandoned += st.Abandoned
	sum.Canceled += st.Canceled
	sum.Busy += st.Busy
	sum.Waiting += st.Waiting
	sum.Paced += st.Paced
	sum.MaxWorkers += st.MaxWorkers
	addTiming(&sum.Wait, st.Wait)
	addTiming(&sum.Run, st.Run)
	for level, t := range st.LevelWait {
		if sum.LevelWait == nil {
			sum.LevelWait = map[int]workerpool.Timing{}
		}
		w := sum.LevelWait[level]
		addTiming(&w, t)
		sum.LevelWait[level] = w
	}
}

// addTiming adds t to sum.
func addTiming(sum *workerpool.Timing, t workerpool.Timing) {
	sum.Count += t.Count
	sum.Total += t.Total
	sum.Max = max(sum.Max, t.Max)
	for i, n := range t.Buckets {
		sum.Buckets[i] += n
	}
}
