package main

import (
	"fmt"
	"math"
	"strings"
)

// Layout of the chart, in pixels.
const (
	chartWidth = 980
	nameWidth  = 110 // pool names, left of the bars
	labelWidth = 190 // value labels, right of the bars
	barHeight  = 14
	barGap     = 4
	groupGap   = 14
	headHeight = 22 // a workload's heading
	topHeight  = 78 // title, subtitle and axis labels
	footHeight = 40
)

// Bar colours: ours, the other bounded pools, unbounded goroutines.
const (
	oursColor  = "#e8590c"
	otherColor = "#4c6ef5"
	unbColor   = "#adb5bd"
)

// chart returns an SVG image of table t: for each workload, one horizontal
// bar per pool whose length is its ns/task divided by the faster floor's,
// on a linear scale, with a dashed line at 1×. Bars beyond the scale's end
// are cut and marked.
func chart(e env, t table) string {
	limit := scaleLimit(t)
	barArea := float64(chartWidth - nameWidth - labelWidth - 20)
	x := func(r float64) float64 { return nameWidth + 10 + barArea*math.Min(r, limit)/limit }

	height := topHeight + footHeight
	for range t.rows {
		height += headHeight + len(t.peers)*(barHeight+barGap) + groupGap
	}

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="24" font-size="16" font-weight="bold">Time per task relative to the faster floor, the shape alone (shorter is faster)</text>`+"\n", 10)
	p(`<text x="%d" y="44" fill="#495057">%s</text>`+"\n", 10, esc(subtitle(e)))

	// Axis: a tick and a grid line per step, the 1× line dashed.
	axisY := topHeight - 10
	bottom := height - footHeight + 4
	for r := 0.0; r <= limit; r++ {
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e9ecef"/>`+"\n", x(r), axisY+4, x(r), bottom)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#495057">%g×</text>`+"\n", x(r), axisY, r)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#495057">%g×</text>`+"\n", x(r), bottom+14, r)
	}

	y := topHeight
	ours := t.index("ours")
	for _, r := range t.rows {
		head := r.w.title + ": " + r.w.label(e.quick)
		if r.floor >= 0 {
			head += fmt.Sprintf(" (faster floor: %s, %s ns)", t.peers[r.floor].name, nanos(r.cells[r.floor].ns))
		}
		p(`<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+15, esc(head))
		y += headHeight
		top := y
		for i, c := range r.cells {
			pe := t.peers[i]
			color, weight := otherColor, "normal"
			switch {
			case i == ours:
				color, weight = oursColor, "bold"
			case !pe.bounded:
				color = unbColor
			}
			p(`<text x="%d" y="%d" text-anchor="end" font-weight="%s">%s</text>`+"\n",
				nameWidth, y+barHeight-3, weight, esc(pe.name))
			if c.ok && !math.IsNaN(c.vsFloor) {
				end := x(c.vsFloor)
				p(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n",
					nameWidth+10, y, end-nameWidth-10, barHeight, color)
				if c.vsFloor > limit {
					// Cut: two white slashes across the bar's end.
					for _, dx := range []float64{-14, -8} {
						p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="white" stroke-width="2"/>`+"\n",
							end+dx, y+barHeight+1, end+dx+5, y-1)
					}
				}
				p(`<text x="%.1f" y="%d" font-weight="%s">%s · %s ns</text>`+"\n",
					end+6, y+barHeight-3, weight, ratio(c.vsFloor), nanos(c.ns))
			}
			y += barHeight + barGap
		}
		// The 1× line, over this workload's bars but not its heading.
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#212529" stroke-dasharray="4 3"/>`+"\n",
			x(1), top-2, x(1), y-barGap+2)
		y += groupGap
	}
	p(`<text x="10" y="%d" fill="#495057">%s</text>`+"\n", height-10,
		esc("ns/task (pool creation to teardown, over tasks) ÷ the faster floor's, per workload (dashed line). Grey: unbounded goroutines, for reference."))
	p("</svg>\n")
	return b.String()
}

// scaleLimit returns the right end of the chart's scale: the largest ratio
// rounded up, at least 2× and at most 6×, so that 1× stays readable.
func scaleLimit(t table) float64 {
	most := 1.0
	for _, r := range t.rows {
		for _, c := range r.cells {
			if c.ok && !math.IsNaN(c.vsFloor) {
				most = math.Max(most, c.vsFloor)
			}
		}
	}
	return math.Min(6, math.Max(2, math.Ceil(most)))
}

// subtitle describes the run in one line.
func subtitle(e env) string {
	mode := fmt.Sprintf("median of %d runs", e.reps)
	if e.quick {
		mode = "quick mode, one run"
	}
	return fmt.Sprintf("%s, GOMAXPROCS %d, %s, %s; %s; %s", e.cpuModel, e.procs, e.goVersion,
		e.date.Format("2006-01-02"), mode, e.command)
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

func esc(s string) string { return xmlEscaper.Replace(s) }
