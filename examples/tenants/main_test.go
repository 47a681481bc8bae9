package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tiny is a load that runs both phases in a few tens of milliseconds.
var tiny = []string{"-workers", "4", "-bulk", "200", "-duration", "60ms", "-work", "200us"}

// tinyConfig is the config run makes of tiny, sampled more often.
func tinyConfig() config {
	cfg := defaultConfig()
	cfg.workers, cfg.bulk, cfg.duration, cfg.work = 4, 200, 60*time.Millisecond, 200*time.Microsecond
	cfg.sample, cfg.draw = 2*time.Millisecond, 10*time.Millisecond
	return cfg
}

// tasksOf returns how many tasks tenant tn submits in a phase of cfg.
func tasksOf(cfg config, tn tenant) int {
	if tn.every == 0 {
		return tn.flood
	}
	return int((cfg.duration + tn.every - 1) / tn.every)
}

// The tests run the load in synctest bubbles, on a fake clock: a phase
// takes no real time, and a task's wait is what the schedule makes it, not
// what a busy machine does to it.

func TestEveryTaskRunsInBothPhases(t *testing.T) {
	synctest.Test(t, testEveryTaskRunsInBothPhases)
}

func testEveryTaskRunsInBothPhases(t *testing.T) {
	cfg := tinyConfig()
	var out bytes.Buffer
	res := demo(cfg, &out)

	require.Len(t, res, len(phases))
	ts := tenants(cfg)
	for _, r := range res {
		assert.Zero(t, r.errs, "%s: failed submissions", r.title)
		require.Len(t, r.tenants, len(ts))
		for i, tn := range ts {
			want := tasksOf(cfg, tn)
			tr := r.tenants[i]
			assert.Equal(t, want, tr.submitted, "%s/%s: submitted", r.title, tn.name)
			assert.Equal(t, want, tr.ran, "%s/%s: ran", r.title, tn.name)
			assert.Len(t, tr.waits, want, "%s/%s: waits", r.title, tn.name)
			assert.Len(t, tr.tasks, want, "%s/%s: tasks", r.title, tn.name)
		}
		// Sampled after StopWait returned: nothing runs or waits, in the
		// pool or in any tenant (a sub-pool's Status, with fair turns).
		require.NotEmpty(t, r.samples)
		last := r.samples[len(r.samples)-1]
		assert.Zero(t, last.busy, "%s: pool busy at the end", r.title)
		assert.Zero(t, last.waiting, "%s: pool waiting at the end", r.title)
		for i, c := range last.tenants {
			assert.Equal(t, count{}, c, "%s/%s: running and waiting at the end", r.title, ts[i].name)
		}
	}
	for _, s := range []string{"shared queue", "fair turns", "bulk", "interactive", "reports"} {
		assert.Contains(t, out.String(), s)
	}
	assert.NotContains(t, out.String(), "\033[", "plain output, no ANSI codes")
}

func TestFairTurnsKeepTheTricklesWaitUnderOneTask(t *testing.T) {
	synctest.Test(t, testFairTurnsKeepTheTricklesWaitUnderOneTask)
}

// With fair turns a trickle's task waits at most for the first worker to
// come free, which is within one task's work; on the shared queue, the
// flood holds it up longer.
func testFairTurnsKeepTheTricklesWaitUnderOneTask(t *testing.T) {
	cfg := tinyConfig()
	res := demo(cfg, io.Discard)
	require.Len(t, res, len(phases))
	longest := func(r result, i int) time.Duration { return percentile(r.tenants[i].waits, 1) }

	var shared time.Duration // the longest wait of a trickle's task
	for _, r := range res {
		for i, tn := range tenants(cfg) {
			if tn.every == 0 {
				continue // the flood
			}
			if r.fair {
				assert.LessOrEqual(t, longest(r, i), cfg.work, "%s/%s: longest wait", r.title, tn.name)
			} else {
				shared = max(shared, longest(r, i))
			}
		}
	}
	assert.Greater(t, shared, cfg.work, "on the shared queue, the flood holds up a trickle")
}

func TestRunWritesSummaryAndChart(t *testing.T) {
	synctest.Test(t, testRunWritesSummaryAndChart)
}

func testRunWritesSummaryAndChart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tenants.svg")
	var stdout, stderr bytes.Buffer
	code := run(append(tiny, "-svg", file), &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	for _, s := range []string{"wait, submission to start", "p99", "phase took", "chart written to"} {
		assert.Contains(t, stdout.String(), s)
	}

	svg, err := os.ReadFile(file)
	require.NoError(t, err)
	root, groups := parseSVG(t, svg)
	assert.Equal(t, "svg", root)
	cfg := tinyConfig() // the load of tiny
	ts := tenants(cfg)
	for _, ph := range phases {
		for _, id := range []string{"pool-workers", "pool-busy"} {
			assert.Contains(t, groups, ph.key+"-"+id)
		}
		for _, tn := range ts {
			for _, series := range []string{"busy", "waiting"} {
				assert.Contains(t, groups, ph.key+"-"+tn.name+"-"+series)
			}
			// Every task of the tiny load is plotted: fewer than maxPoints.
			assert.Equal(t, tasksOf(cfg, tn), groups[ph.key+"-"+tn.name+"-wait"], "%s/%s: points", ph.key, tn.name)
		}
	}
}

// parseSVG decodes svg as XML, failing t unless it is well formed, and
// returns the name of its root element and, for each <g> with an id, the
// number of elements in it.
func parseSVG(t *testing.T, svg []byte) (root string, groups map[string]int) {
	t.Helper()
	groups = make(map[string]int)
	d := xml.NewDecoder(bytes.NewReader(svg))
	var open []string // the ids of the <g> elements we are in
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "well-formed XML")
		switch e := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = e.Name.Local
			}
			if len(open) > 0 && open[len(open)-1] != "" {
				groups[open[len(open)-1]]++
			}
			id := ""
			if e.Name.Local == "g" {
				for _, a := range e.Attr {
					if a.Name.Local == "id" {
						id = a.Value
						groups[id] += 0
					}
				}
			}
			open = append(open, id)
		case xml.EndElement:
			open = open[:len(open)-1]
		}
	}
	return root, groups
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-workers", "0"},
		{"-bulk", "-1"},
		{"-duration", "0s"},
		{"-work", "-1ms"},
		{"extra"},
		{"-nosuchflag"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, 2, run(args, &stdout, &stderr))
			assert.NotEmpty(t, stderr.String())
			assert.Empty(t, stdout.String(), "no phase ran")
		})
	}
}
