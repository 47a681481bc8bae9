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
	headHeight = 22  // a workload's heading
	topHeight  = 78  // title, subtitle and axis labels
	footHeight = 58  // axis labels, legend and footnote
	charWidth  = 6.6 // about the width of one character at font-size 12
)

// Colours: bars of ours, of the floors, of the other bounded pools and of
// unbounded goroutines; the line at ours' target.
const (
	oursColor   = "#e8590c"
	floorColor  = "#2f9e44"
	otherColor  = "#4c6ef5"
	unbColor    = "#adb5bd"
	targetColor = "#ffc078"
)

// chart returns an SVG image of table t: for each workload, one horizontal
// bar per pool whose length is its ns/task divided by the faster floor's,
// on a linear scale, with a dashed line at 1× and a light line at ours'
// target of floorTarget×. Bars beyond the scale's end are cut and marked.
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

	// Axis: a tick and a grid line per step.
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
		} else {
			head += " (no floor measured)"
		}
		p(`<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+15, esc(head))
		y += headHeight
		top := y
		// The value labels go last, over the vertical lines, each on a
		// white halo so that the lines do not cross its text.
		var labels strings.Builder
		label := func(format string, args ...any) { fmt.Fprintf(&labels, format, args...) }
		for i, c := range r.cells {
			pe := t.peers[i]
			color, weight := barColor(pe, i == ours), "normal"
			if i == ours {
				weight = "bold"
			}
			p(`<text x="%d" y="%d" text-anchor="end" font-weight="%s">%s</text>`+"\n",
				nameWidth, y+barHeight-3, weight, esc(pe.name))
			switch {
			case c.ok && !math.IsNaN(c.vsFloor):
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
				label(`<text x="%.1f" y="%d" font-weight="%s" %s>%s · %s ns</text>`+"\n",
					end+6, y+barHeight-3, weight, halo, ratio(c.vsFloor), nanos(c.ns))
			case c.ok: // no floor to divide by: the time alone
				label(`<text x="%d" y="%d" font-weight="%s" %s>%s ns</text>`+"\n",
					nameWidth+16, y+barHeight-3, weight, halo, nanos(c.ns))
			}
			y += barHeight + barGap
		}
		// The target and the 1× lines, over this workload's bars but not
		// its heading.
		if r.floor >= 0 {
			p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2"/>`+"\n",
				x(floorTarget), top-2, x(floorTarget), y-barGap+2, targetColor)
			p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#212529" stroke-dasharray="4 3"/>`+"\n",
				x(1), top-2, x(1), y-barGap+2)
		}
		b.WriteString(labels.String())
		y += groupGap
	}
	legend(p, height-28)
	p(`<text x="10" y="%d" fill="#495057">%s</text>`+"\n", height-8,
		esc(fmt.Sprintf("ns/task (pool creation to teardown, over tasks) ÷ the faster floor's, per workload. Targets for ours: ≤ %.2f× the floor, ≤ %.2f× gammazero.",
			floorTarget, gammazeroTarget)))
	p("</svg>\n")
	return b.String()
}

// halo is the attributes of a text drawn over a white outline, which hides
// the lines it crosses.
const halo = `stroke="white" stroke-width="3" stroke-linejoin="round" paint-order="stroke"`

// barColor returns the colour of pool p's bars; isOurs is true for ours.
func barColor(p peer, isOurs bool) string {
	switch {
	case isOurs:
		return oursColor
	case isFloor(p):
		return floorColor
	case !p.bounded:
		return unbColor
	}
	return otherColor
}

// legend writes, with p, one line at baseline y that names the bar colours
// and the two vertical lines.
func legend(p func(format string, args ...any), y int) {
	x := 10.0
	for _, k := range []struct{ color, text string }{
		{oursColor, "ours"},
		{floorColor, "the floors (floor.go)"},
		{otherColor, "other pools"},
		{unbColor, "unbounded goroutines"},
	} {
		p(`<rect x="%.1f" y="%d" width="10" height="10" fill="%s"/>`+"\n", x, y-9, k.color)
		p(`<text x="%.1f" y="%d" fill="#495057">%s</text>`+"\n", x+14, y, esc(k.text))
		x += 14 + charWidth*float64(len([]rune(k.text))) + 16
	}
	for _, k := range []struct{ stroke, text string }{
		{`stroke="#212529" stroke-dasharray="4 3"`, "1×: the faster floor"},
		{`stroke="` + targetColor + `" stroke-width="2"`, fmt.Sprintf("%.2f×: ours' target", floorTarget)},
	} {
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" %s/>`+"\n", x+4, y-11, x+4, y+2, k.stroke)
		p(`<text x="%.1f" y="%d" fill="#495057">%s</text>`+"\n", x+12, y, esc(k.text))
		x += 12 + charWidth*float64(len([]rune(k.text))) + 16
	}
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

// xmlEscaper escapes text for SVG.
var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// esc returns s escaped for SVG text.
func esc(s string) string { return xmlEscaper.Replace(s) }
