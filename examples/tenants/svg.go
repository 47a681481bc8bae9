package main

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"time"
)

// Layout of the chart, in pixels: a column per phase, side by side on the
// same scales, and three rows of panels.
const (
	chartWidth  = 1000
	leftMargin  = 70 // the rows' titles and the left column's tick labels
	rightMargin = 28 // the last time label
	columnGap   = 52 // the right column's tick labels
	headTop     = 100
	rowTop      = 132 // the first row's top
	rowHeight   = 150
	rowGap      = 44 // tick labels and the next row's title
)

// Colours: one per tenant, in the order of tenants, and the pool's.
var (
	tenantColors = []string{"#f59f00", "#1c7ed6", "#2f9e44", "#ae3ec9", "#e03131"}
	poolColor    = "#212529"
	gridColor    = "#e9ecef"
	textColor    = "#495057"
)

// maxPoints is the most tasks a tenant plots per phase in the wait row:
// a flood has thousands, and every one of them would make the file large
// without showing more.
const maxPoints = 600

// chart returns an SVG timeline of res, the phases of a run of cfg. Each
// column is a phase, and its rows show, against the time since the phase
// started: the tasks running (each tenant's, stacked, with the pool's
// workers and busy workers as lines), the tasks waiting (a line per
// tenant), and each task's wait, by the time it was submitted, on a log
// scale. Each series is a <g> whose id is phase-series, such as
// "fair-bulk-busy" or "shared-pool-workers".
func chart(cfg config, res []result) []byte {
	ts := tenants(cfg)
	colWidth := float64(chartWidth-leftMargin-rightMargin-columnGap*(len(res)-1)) / float64(len(res))
	rows := 3
	height := rowTop + rows*(rowHeight+rowGap) + 36

	// The scales, shared by the columns so that they compare at a glance.
	var tMax time.Duration
	maxWaiting, maxWorkers := 1, cfg.workers
	maxWait := time.Millisecond
	for _, r := range res {
		tMax = max(tMax, r.elapsed)
		for _, s := range r.samples {
			tMax = max(tMax, s.at)
			maxWorkers = max(maxWorkers, s.workers, s.busy)
			for _, c := range s.tenants {
				maxWaiting = max(maxWaiting, c.waiting)
			}
		}
		for _, tr := range r.tenants {
			if n := len(tr.waits); n > 0 {
				maxWait = max(maxWait, tr.waits[n-1])
			}
		}
	}
	secs := tMax.Seconds()
	if secs <= 0 {
		secs = 1
	}
	xStep := niceStep(secs, 6)
	xEnd := math.Ceil(secs/xStep-1e-9) * xStep
	busyStep := niceStep(float64(maxWorkers), 4)
	busyEnd := math.Ceil(float64(maxWorkers)/busyStep) * busyStep
	waitStep := niceStep(float64(maxWaiting), 4)
	waitEnd := math.Ceil(float64(maxWaiting)/waitStep) * waitStep
	// The wait row's decades, from 10 µs up to the longest wait.
	loDecade, hiDecade := -2.0, math.Ceil(math.Log10(float64(maxWait)/float64(time.Millisecond)))

	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	p("<title>One tenant floods a workerpool: a shared queue and fair turns between sub-pools</title>\n")
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="10" y="24" font-size="16" font-weight="bold">One tenant floods the pool: one shared queue, then fair turns between sub-pools</text>` + "\n")
	var load []string
	for _, t := range ts {
		load = append(load, t.name+": "+t.describe())
	}
	p(`<text x="10" y="44" fill="%s">%s</text>`+"\n", textColor,
		esc(fmt.Sprintf("%d workers; in each phase, %s", cfg.workers, strings.Join(load, "; "))))

	// Legend.
	x := 10.0
	for i, t := range ts {
		p(`<rect x="%.0f" y="58" width="12" height="12" fill="%s"/>`+"\n", x, tenantColors[i%len(tenantColors)])
		p(`<text x="%.0f" y="69">%s</text>`+"\n", x+16, esc(t.name))
		x += 28 + 7.5*float64(len(t.name))
	}
	p(`<line x1="%.0f" y1="64" x2="%.0f" y2="64" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3"/>`+"\n", x, x+22, poolColor)
	p(`<text x="%.0f" y="69">pool: workers</text>`+"\n", x+26)
	x += 130
	p(`<line x1="%.0f" y1="64" x2="%.0f" y2="64" stroke="%s" stroke-width="1.5"/>`+"\n", x, x+22, poolColor)
	p(`<text x="%.0f" y="69">pool: busy workers</text>`+"\n", x+26)

	rowTitles := []string{"tasks running", "tasks waiting", "wait of each task"}
	for row, title := range rowTitles {
		cy := float64(rowTop + row*(rowHeight+rowGap) + rowHeight/2)
		p(`<text x="18" y="%.0f" text-anchor="middle" transform="rotate(-90 18 %.0f)" font-weight="bold">%s</text>`+"\n",
			cy, cy, title)
	}

	for col, r := range res {
		x0 := leftMargin + float64(col)*(colWidth+float64(columnGap))
		xOf := func(d time.Duration) float64 { return x0 + colWidth*d.Seconds()/xEnd }
		head := "one shared queue: every tenant submits to the Pool"
		if r.fair {
			head = "fair turns: each tenant submits to its own Subpool"
		}
		p(`<text x="%.1f" y="%d" font-weight="bold">%s</text>`+"\n", x0, headTop, esc(head))
		var p99s []string
		for i, t := range ts {
			p99s = append(p99s, t.name+" "+ms(percentile(r.tenants[i].waits, 0.99)))
		}
		p(`<text x="%.1f" y="%d" fill="%s">%s</text>`+"\n", x0, headTop+16, textColor,
			esc("wait p99: "+strings.Join(p99s, ", ")+"; took "+ms(r.elapsed)))

		for row := range rows {
			top := float64(rowTop + row*(rowHeight+rowGap))
			bottom := top + rowHeight
			// Time grid and labels.
			for v := 0.0; v <= xEnd+1e-9; v += xStep {
				gx := x0 + colWidth*v/xEnd
				p(`<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="%s"/>`+"\n", gx, top, gx, bottom, gridColor)
				p(`<text x="%.1f" y="%.0f" text-anchor="middle" fill="%s">%gs</text>`+"\n", gx, bottom+14, textColor, round(v))
			}
			// Value grid and labels.
			var yOf func(v float64) float64
			switch row {
			case 0, 1:
				end, step := busyEnd, busyStep
				if row == 1 {
					end, step = waitEnd, waitStep
				}
				yOf = func(v float64) float64 { return bottom - rowHeight*v/end }
				for v := 0.0; v <= end+1e-9; v += step {
					hline(p, x0, colWidth, yOf(v), fmt.Sprintf("%g", round(v)))
				}
			case 2:
				yOf = func(v float64) float64 { return bottom - rowHeight*(v-loDecade)/(hiDecade-loDecade) }
				for d := loDecade; d <= hiDecade; d++ {
					hline(p, x0, colWidth, yOf(d), time.Duration(math.Pow(10, d)*float64(time.Millisecond)).String())
				}
			}
			p(`<rect x="%.1f" y="%.0f" width="%.1f" height="%d" fill="none" stroke="#ced4da"/>`+"\n", x0, top, colWidth, rowHeight)

			switch row {
			case 0:
				running(p, r, ts, xOf, yOf)
			case 1:
				for i, t := range ts {
					var pts []string
					for _, s := range r.samples {
						pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(s.at), yOf(float64(s.tenants[i].waiting))))
					}
					p(`<g id="%s-%s-waiting"><polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/></g>`+"\n",
						r.key, esc(t.name), strings.Join(pts, " "), tenantColors[i%len(tenantColors)])
				}
			case 2:
				for i, t := range ts {
					p(`<g id="%s-%s-wait" fill="%s" fill-opacity="0.55">`+"\n", r.key, esc(t.name), tenantColors[i%len(tenantColors)])
					tasks := r.tenants[i].tasks
					every := max(1, (len(tasks)+maxPoints-1)/maxPoints)
					for j := 0; j < len(tasks); j += every {
						w := float64(tasks[j].wait) / float64(time.Millisecond)
						y := yOf(math.Max(loDecade, math.Log10(math.Max(w, 1e-9))))
						p(`<circle cx="%.1f" cy="%.1f" r="1.8"/>`+"\n", xOf(tasks[j].submitted), y)
					}
					p("</g>\n")
				}
			}
		}
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="%s">seconds since the phase started (wait: by the time the task was submitted)</text>`+"\n",
			x0+colWidth/2, rowTop+rows*(rowHeight+rowGap)-10, textColor)
	}
	p(`<text x="10" y="%d" fill="%s">%s</text>`+"\n", height-24, textColor,
		esc(fmt.Sprintf("Sampled every %v from Pool.Status and, with fair turns, Subpool.Status; on the shared queue, from the demo's own counts per tenant.", cfg.sample)))
	p(`<text x="10" y="%d" fill="%s">%s</text>`+"\n", height-8, textColor,
		esc(fmt.Sprintf("Wait: from submission to start, on a log scale; a tenant plots at most %d of its tasks. Made by go run ./examples/tenants -svg FILE", maxPoints)))
	p("</svg>\n")
	return b.Bytes()
}

// running draws the running row of r: each tenant's running tasks as a
// stacked area, then the pool's workers (dashed) and busy workers.
func running(p func(string, ...any), r result, ts []tenant, xOf func(time.Duration) float64, yOf func(float64) float64) {
	below := make([]int, len(r.samples))
	for i, t := range ts {
		var top, bottom []string
		for j, s := range r.samples {
			top = append(top, fmt.Sprintf("%.1f,%.1f", xOf(s.at), yOf(float64(below[j]+s.tenants[i].busy))))
		}
		for j := len(r.samples) - 1; j >= 0; j-- {
			bottom = append(bottom, fmt.Sprintf("%.1f,%.1f", xOf(r.samples[j].at), yOf(float64(below[j]))))
			below[j] += r.samples[j].tenants[i].busy
		}
		p(`<g id="%s-%s-busy"><polygon points="%s %s" fill="%s" fill-opacity="0.8"/></g>`+"\n",
			r.key, esc(t.name), strings.Join(top, " "), strings.Join(bottom, " "), tenantColors[i%len(tenantColors)])
	}
	for _, series := range []struct {
		name, dash string
		value      func(sample) int
	}{
		{"workers", ` stroke-dasharray="5 3"`, func(s sample) int { return s.workers }},
		{"busy", "", func(s sample) int { return s.busy }},
	} {
		var pts []string
		for _, s := range r.samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(s.at), yOf(float64(series.value(s)))))
		}
		p(`<g id="%s-pool-%s"><polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"%s/></g>`+"\n",
			r.key, series.name, strings.Join(pts, " "), poolColor, series.dash)
	}
}

// hline draws a grid line across a panel at y, labelled on its left.
func hline(p func(string, ...any), x0, width, y float64, label string) {
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x0, y, x0+width, y, gridColor)
	p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", x0-5, y+4, textColor, esc(label))
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts
// [0, v] into at most about n parts.
func niceStep(v float64, n int) float64 {
	if v <= 0 {
		return 1
	}
	raw := v / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// round drops the float noise of repeated additions, for a tick label.
func round(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// esc escapes s for SVG text and attributes.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
