package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A short run serves, scrapes itself twice and stops cleanly; its counts
// are exact: 34 ticks of one mail task, three thumbnails (the hundredth
// panics) and one task of the pool's own.
func TestTheExampleScrapesItselfAndStops(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out, 34*tick, false))
	text := out.String()
	lines := strings.Split(text, "\n")
	require.Contains(t, lines[0], "serving http://127.0.0.1:")
	for _, want := range []string{
		`workerpool_subpool_tasks_running{pool="example",subpool="mail"} `,
		`workerpool_tasks_waiting{pool="example"} `,
		`workerpool_subpool_tasks_submitted_total{pool="example",subpool="mail"} 34` + "\n",
		`workerpool_subpool_tasks_completed_total{pool="example",subpool="thumbnails"} 102` + "\n",
		`workerpool_subpool_tasks_panicked_total{pool="example",subpool="thumbnails"} 1` + "\n",
		`workerpool_tasks_completed_total{pool="example"} 170` + "\n",
		`workerpool_subpool_max_workers{pool="example",subpool="mail"} 2` + "\n",
		`workerpool_subpool_task_wait_seconds_count{pool="example",subpool="mail"} 34` + "\n",
		`workerpool_subpool_task_wait_seconds_bucket{pool="example",subpool="mail",le="+Inf"} 34` + "\n",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, "# HELP", "an excerpt")
	assert.NotContains(t, text, "workerpool_tasks_rejected_total", "no zero counters")
}

func TestTheFullScrapeHasEveryMetric(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out, 2*tick, true))
	for _, name := range []string{"workerpool_tasks_rejected_total", "workerpool_workers", "workerpool_task_run_seconds_bucket", "# HELP"} {
		assert.Contains(t, out.String(), name)
	}
}
