package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dispatchkit/workerpool"
)

// A monitor samples a phase's pool and shows it live.
type monitor struct {
	cfg     config
	ph      phase
	p       *workerpool.Pool
	subs    []*workerpool.Subpool // each tenant's, or nil in the shared-queue phase
	tenants []tenant
	tallies []*tally
	out     io.Writer
	start   time.Time

	// Owned by watch until it returns.
	samples []sample
	drawn   int // lines the last view wrote; 0 before the first
}

// watch samples the pool every cfg.sample and shows it every cfg.draw,
// until stop is closed; then it samples and shows it once more.
func (m *monitor) watch(stop <-chan struct{}) {
	ticker := time.NewTicker(m.cfg.sample)
	defer ticker.Stop()
	m.samples = append(m.samples, m.take())
	m.show()
	shown := time.Now()
	for final := false; !final; {
		select {
		case <-stop:
			// The phase is over: show how it ended.
			final = true
		case <-ticker.C:
			// Time for a sample.
		}
		m.samples = append(m.samples, m.take())
		if final || time.Since(shown) >= m.cfg.draw {
			m.show()
			shown = time.Now()
		}
	}
}

// take reads the pool's Status, and each tenant's counts.
func (m *monitor) take() sample {
	ps := m.p.Status()
	s := sample{at: time.Since(m.start), workers: ps.Workers, busy: ps.Busy, waiting: ps.Waiting}
	for i := range m.tenants {
		busy, waiting, _ := m.counts(i)
		s.tenants = append(s.tenants, count{busy: busy, waiting: waiting})
	}
	return s
}

// counts returns tenant i's tasks running, waiting and done: its
// sub-pool's Status, or in the shared-queue phase the demo's own counts.
func (m *monitor) counts(i int) (busy, waiting, done int) {
	if sub := m.subs[i]; sub != nil {
		st := sub.Status()
		return st.Busy, st.Waiting, int(st.Completed)
	}
	return m.tallies[i].now()
}

// row is the format of the live view's tenant lines: name, limit, tasks
// running, waiting and done, the median and 99th percentile of the waits of
// the tasks started so far, and how long the oldest waiting task has waited.
const row = "  %-12s %5s %5s %8s %6s %9s %9s %9s"

// show writes the live view: a line for the pool and one per tenant. On a
// terminal it redraws the previous view in place; otherwise it appends.
func (m *monitor) show() {
	ps := m.p.Status()
	lines := []string{
		fmt.Sprintf("%-12s %5.2fs  pool: workers %2d of %d, busy %2d, waiting %5d, done %5d",
			m.ph.title, time.Since(m.start).Seconds(), ps.Workers, ps.MaxWorkers, ps.Busy, ps.Waiting, ps.Completed),
	}
	if m.cfg.tty || m.drawn == 0 { // plain output shows the header once
		lines = append(lines, fmt.Sprintf(row, "tenant", "limit", "busy", "waiting", "done", "wait p50", "p99", "oldest"))
	}
	for i, t := range m.tenants {
		limit := "-" // one shared queue: no limit but the pool's
		if sub := m.subs[i]; sub != nil {
			limit = fmt.Sprint(sub.Status().MaxWorkers)
		}
		busy, waiting, done := m.counts(i)
		p50, p99, oldest := "-", "-", "-"
		if w := m.tallies[i].sortedWaits(); len(w) > 0 {
			p50, p99 = ms(percentile(w, 0.50)), ms(percentile(w, 0.99))
		}
		if d := m.tallies[i].oldest(time.Now()); d > 0 {
			oldest = ms(d)
		}
		lines = append(lines, fmt.Sprintf(row, t.name, limit, fmt.Sprint(busy), fmt.Sprint(waiting), fmt.Sprint(done), p50, p99, oldest))
	}
	var b strings.Builder
	if m.cfg.tty {
		if m.drawn > 0 {
			fmt.Fprintf(&b, "\033[%dA", m.drawn) // back to the last view's first line
		}
		for _, l := range lines {
			b.WriteString("\r\033[K" + l + "\n") // erase the old line, write the new
		}
	} else {
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	}
	m.drawn = len(lines)
	io.WriteString(m.out, b.String())
}

// summary writes the table that compares the phases: each tenant's wait,
// the time each phase took, and when the flood's last task ended.
func summary(out io.Writer, cfg config, res []result) {
	ts := tenants(cfg)
	var b strings.Builder
	line := func(s string) { b.WriteString(strings.TrimRight(s, " ") + "\n") }
	line(fmt.Sprintf("\n%d workers; load, in each phase:", cfg.workers))
	for _, t := range ts {
		line(fmt.Sprintf("  %-12s %s", t.name, t.describe()))
	}
	head := fmt.Sprintf("\n%-25s", "wait, submission to start")
	cols := fmt.Sprintf("%-14s %10s", "tenant", "tasks")
	took := fmt.Sprintf("%-25s", "phase took")
	last := fmt.Sprintf("%-25s", ts[0].name+"'s last task ended")
	for _, r := range res {
		head += fmt.Sprintf("   %-26s", r.title)
		cols += fmt.Sprintf("   %8s %8s %8s", "p50", "p99", "max")
		took += fmt.Sprintf("   %8s %17s", ms(r.elapsed), "")
		end := "-"
		if r.tenants[0].ran > 0 {
			end = ms(r.tenants[0].lastEnd)
		}
		last += fmt.Sprintf("   %8s %17s", end, "")
	}
	line(head)
	line(cols)
	for i, t := range ts {
		row := fmt.Sprintf("%-14s %10d", t.name, res[0].tenants[i].ran)
		for _, r := range res {
			q := []string{"-", "-", "-"}
			if w := r.tenants[i].waits; len(w) > 0 {
				q = []string{ms(percentile(w, 0.50)), ms(percentile(w, 0.99)), ms(percentile(w, 1))}
			}
			row += fmt.Sprintf("   %8s %8s %8s", q[0], q[1], q[2])
		}
		line(row)
	}
	line(took)
	line(last)
	io.WriteString(out, b.String())
}

// ms formats d for a table: in milliseconds below a second, with three
// significant digits or so, else in seconds.
func ms(d time.Duration) string {
	switch f := float64(d) / float64(time.Millisecond); {
	case f < 10:
		return fmt.Sprintf("%.2fms", f)
	case f < 100:
		return fmt.Sprintf("%.1fms", f)
	case f < 1000:
		return fmt.Sprintf("%.0fms", f)
	default:
		return fmt.Sprintf("%.2fs", f/1000)
	}
}
