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
		p("![ns per task relative to the faster floor](%s)\n\n", svgLink)
	}

	ours, gz := t.index("ours"), t.index("gammazero")
	p("## Ours against the floor and gammazero\n\n")
	p("The floor is the cheapest code of our pool's exact shape, with none of its features ")
	p("(`floor.go`: one dispatcher goroutine behind an unbuffered channel, a deque, workers started on demand), ")
	p("in two variants: `floor-buffered` hands tasks to the workers through a buffer of 64, `floor-direct` directly, as gammazero does. ")
	p("It is the baseline because the shape alone costs that much: what ours pays above the faster variant, workload by workload, is what its features cost. ")
	p("gammazero/workerpool is the one peer of the same shape. ")
	p("Targets, in every workload: ours ≤ %.2f× the faster floor, and ours ≤ %.2f× gammazero (never slower); met means both. ", floorTarget, gammazeroTarget)
	p("The ratios are of the unrounded medians.")
	if e.quick {
		p(" The targets are set for full mode: a quick run's verdicts are a smoke test.")
	}
	p("\n\n")
	p("| workload | size | ours ns/task | faster floor | its ns/task | ours / floor | gammazero ns/task | ours / gammazero | target | met |\n")
	p("|---|---|---:|---|---:|---:|---:|---:|---|:-:|\n")
	target := fmt.Sprintf("≤ %.2f× floor, ≤ %.2f× gammazero", floorTarget, gammazeroTarget)
	for _, r := range t.rows {
		if ours < 0 || !r.cells[ours].ok {
			continue
		}
		floorName, floorNs, gzNs := "–", "–", "–"
		if r.floor >= 0 {
			floorName, floorNs = t.peers[r.floor].name, nanos(r.cells[r.floor].ns)
		}
		if gz >= 0 && r.cells[gz].ok {
			gzNs = nanos(r.cells[gz].ns)
		}
		metText := "–"
		if met, known := r.meetsTargets(ours, gz); known && met {
			metText = "yes"
		} else if known {
			metText = "**no**"
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.w.title, r.w.label(e.quick),
			nanos(r.cells[ours].ns), floorName, floorNs, ratio3(r.over(ours, r.floor)),
			gzNs, ratio3(r.over(ours, gz)), target, metText)
	}

	p("\nFor information, not a target: the best other pool is the fastest pool other than ours and the floors ")
	p("that honours the worker limit (unbounded goroutines are shown below but do not count).\n\n")
	p("| workload | best other | its ns/task | ours / best other |\n")
	p("|---|---|---:|---:|\n")
	for _, r := range t.rows {
		if ours < 0 || !r.cells[ours].ok {
			continue
		}
		name, ns := "–", "–"
		if r.best >= 0 {
			name, ns = t.peers[r.best].name, nanos(r.cells[r.best].ns)
		}
		p("| %s | %s | %s | %s |\n", r.w.title, name, ns, ratio(r.over(ours, r.best)))
	}

	p("\n## Every pool, per workload\n\n")
	p("ns/task is the wall time from creating the pool to the end of its teardown, divided by the tasks; ")
	p("× floor divides it by the faster floor's (1.00× on that floor's row). Allocations and bytes are runtime.MemStats deltas ")
	p("over the same span, per task; %s. Others' CPU is the share of the machine's CPU that other processes took ", samplerMethod)
	p("during the measurement (median): above a few per cent, that row is noisy.\n")
	for _, r := range t.rows {
		p("\n### %s: %s\n\n", r.w.title, r.w.label(e.quick))
		cpu := r.w.kind == cpu
		if cpu {
			p("Ideal wall time is the tasks' CPU time, measured by running tasks serially in the same process, ")
			p("divided by GOMAXPROCS; it is shown for information, not as a target.\n\n")
		}
		p("| pool | ns/task | × floor | allocs/task | B/task | peak goroutines | peak heap | others' CPU |")
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
			p("| %s | %s | %s | %.2f | %.0f | %.0f | %s | %s |", name, nanos(c.ns), ratio(c.vsFloor),
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
	p("the floors submit a task that marks a fresh WaitGroup done, and the others a closure that closes a fresh done channel, and wait on it. ")
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

// ratio3 formats a ratio as "1.234×", or "–" for NaN: precise enough that
// a ratio just over a target does not print as the target itself.
func ratio3(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.3f×", x)
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
