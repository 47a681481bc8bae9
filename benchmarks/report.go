package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"
)

// report returns the Markdown report of table t.
func report(e env, t table, svgLink string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# Peer comparison\n\n")
	mode := fmt.Sprintf("full mode, median of %d repetitions", e.reps)
	if e.quick {
		mode = "quick mode, one repetition of smaller workloads"
	}
	p("`%s` in `benchmarks/`, %s; %s, %s in all.\n\n", e.command, e.date.Format("2006-01-02 15:04 UTC"), mode, e.elapsed.Round(time.Second))
	if e.library != "" {
		p("Library: %s.\n\n", e.library)
	}
	p("Machine: %s, %d cores, GOMAXPROCS %d, %s, %s. ", e.cpuModel, e.cores, e.procs, e.platform, e.goVersion)
	p("A tiny task takes %s and a CPU-bound task %s when run serially.", duration(e.tinyNs), duration(e.cpuNs))
	if e.otherCPU >= 0 {
		p(" Other processes used %.0f%% of the machine's CPU during the run (/proc/stat less the run's own CPU time)", 100*e.otherCPU)
		if !math.IsNaN(t.otherMedian) {
			p(", a median %.0f%% and at most %.0f%% during the %d measurements kept", 100*t.otherMedian, 100*t.otherMax, t.measurements)
		}
		if e.quick {
			p("; quick mode runs no measurement again.")
		} else {
			p("; %d measurements were run again because others took more than %.0f%%.", t.retried, 100*e.maxOther)
		}
	}
	p("\n\n")
	if svgLink != "" {
		p("![ns per task relative to the best other pool](%s)\n\n", svgLink)
	}

	p("## Ours against gammazero/workerpool and the best other pool\n\n")
	p("gammazero/workerpool is the one peer of the same shape (a dispatcher goroutine, an unbuffered submission channel, a waiting queue). ")
	p("The best other pool is the fastest pool other than ours that honours the worker limit ")
	p("(unbounded goroutines are shown for reference but do not count). ")
	p("Targets: ours ≤ %.1f× gammazero in every workload; against the best other pool as the table says; ", gammazeroTarget)
	p("CPU-bound work ≤ %.2f× the ideal wall time.\n\n", idealTarget)
	p("| workload | size | ours ns/task | gammazero | ours / gammazero | best other | its ns/task | ours / best other | target | met |\n")
	p("|---|---|---:|---:|---:|---|---:|---:|---:|:-:|\n")
	ours, gz := t.index("ours"), t.index("gammazero")
	for _, r := range t.rows {
		if ours < 0 || r.best < 0 || !r.cells[ours].ok {
			continue
		}
		c, best := r.cells[ours], r.cells[r.best]
		met := true
		vsGz, gzNs := "–", "–"
		if gz >= 0 && r.cells[gz].ok {
			g := c.ns / r.cells[gz].ns
			vsGz, gzNs = ratio(g), nanos(r.cells[gz].ns)
			met = g <= gammazeroTarget
		}
		target := fmt.Sprintf("≤ %.1f×", r.w.target())
		if r.w.target() == 0 {
			target = fmt.Sprintf("≤ %.2f× ideal (%.3f×)", idealTarget, c.vsIdeal)
			met = met && c.vsIdeal <= idealTarget
		} else {
			met = met && c.vsBest <= r.w.target()
		}
		metText := "yes"
		if !met {
			metText = "**no**"
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.w.title, r.w.label(e.quick), nanos(c.ns), gzNs, vsGz,
			t.peers[r.best].name, nanos(best.ns), ratio(c.vsBest), target, metText)
	}

	p("\n## Every pool, per workload\n\n")
	p("ns/task is the wall time from creating the pool to the end of its teardown, divided by the tasks; ")
	p("× best other divides it by the best other pool's. Allocations and bytes are runtime.MemStats deltas ")
	p("over the same span, per task; %s. Others' CPU is the share of the machine's CPU that other processes took ", samplerMethod)
	p("during the measurement (median): above a few per cent, that row is noisy.\n")
	for _, r := range t.rows {
		p("\n### %s: %s\n\n", r.w.title, r.w.label(e.quick))
		cpu := r.w.kind == cpu
		if cpu {
			p("Ideal wall time is the tasks' CPU time, measured by running tasks serially in the same process, ")
			p("divided by GOMAXPROCS. Target: within %.0f%% of it.\n\n", 100*(idealTarget-1))
		}
		p("| pool | ns/task | × best other | allocs/task | B/task | peak goroutines | peak heap | others' CPU |")
		if cpu {
			p(" wall | ideal | × ideal |")
		}
		p("\n|---|---:|---:|---:|---:|---:|---:|---:|")
		if cpu {
			p("---:|---:|---:|")
		}
		p("\n")
		for i, c := range r.cells {
			if !c.ok {
				continue
			}
			name := t.peers[i].name
			if i == ours {
				name = "**ours**"
			}
			p("| %s | %s | %s | %.2f | %.0f | %.0f | %s | %s |", name, nanos(c.ns), ratio(c.vsBest),
				c.allocs, c.bytes, c.goroutines, bytesize(c.heap), percent(c.other))
			if cpu {
				p(" %s | %s | %.3f× |", duration(time.Duration(c.wall)), duration(time.Duration(c.ideal)), c.vsIdeal)
			}
			p("\n")
		}
	}

	p("\n## Pools\n\n")
	for _, pe := range t.peers {
		p("- `%s`: %s\n", pe.name, pe.title)
	}
	p("\nEvery pool gets the workload's worker limit, except `goroutines`, which starts one goroutine per task. ")
	p("Submit-and-wait uses `SubmitWait` (ours, gammazero) and `Submit(f).Wait()` (pond); ")
	p("the others submit a closure that closes a fresh done channel and wait on it. ")
	p("Each measurement runs in its own process; the pools take turns within each repetition; ")
	p("every run checks that every task ran exactly once.\n")
	return b.String()
}

// index returns the position of the peer called name in t, or -1.
func (t table) index(name string) int {
	for i, p := range t.peers {
		if p.name == name {
			return i
		}
	}
	return -1
}

// relLink returns the link to target from a file written at from.
func relLink(from, target string) string {
	af, err1 := filepath.Abs(filepath.Dir(from))
	at, err2 := filepath.Abs(target)
	if err1 != nil || err2 != nil {
		return target
	}
	rel, err := filepath.Rel(af, at)
	if err != nil {
		return target
	}
	return filepath.ToSlash(rel)
}

// percent formats a share as "12%", or "–" for NaN.
func percent(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

// nanos formats a time per task in ns, with a decimal below 100.
func nanos(ns float64) string {
	if ns < 100 {
		return fmt.Sprintf("%.1f", ns)
	}
	return fmt.Sprintf("%.0f", ns)
}

// ratio formats a ratio as "1.23×", or "–" for NaN.
func ratio(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

// duration formats d with about three significant digits.
func duration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return sig3(d.Seconds()) + " s"
	case d >= time.Millisecond:
		return sig3(float64(d)/1e6) + " ms"
	case d >= time.Microsecond:
		return sig3(float64(d)/1e3) + " µs"
	}
	return fmt.Sprintf("%d ns", d.Nanoseconds())
}

// sig3 formats v, at least 1, with about three significant digits and no
// exponent.
func sig3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// bytesize formats n bytes in KiB, MiB or GiB.
func bytesize(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", n/(1<<10))
}
