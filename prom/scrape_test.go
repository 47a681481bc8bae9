package prom_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// The helpers of the tests: a real promhttp handler on a loopback port,
// a scrape parsed as Prometheus parses it, and checks of what it holds
// against a pool's Status.

// families are the metric families of one scrape, by name.
type families map[string]*dto.MetricFamily

// serve registers cs in a new pedantic registry, which checks each
// collected metric against its description, serves it over HTTP on a
// loopback port until the test ends, and returns the URL to scrape.
func serve(t testing.TB, cs ...prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		require.NoError(t, reg.Register(c))
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// scrapeClient gives up on a scrape that takes far longer than any
// should, so that a blocked scrape fails its test rather than hangs it.
var scrapeClient = &http.Client{Timeout: 30 * time.Second}

// scrape gets url as Prometheus does, in the text format, and parses the
// answer with the parser Prometheus uses for it.
func scrape(t testing.TB, url string) families {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := scrapeClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), "Content-Type %q", resp.Header.Get("Content-Type"))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// gather collects reg's metrics without HTTP, for the tests on the fake
// clock of testing/synctest, where no network runs.
func gather(t testing.TB, reg prometheus.Gatherer) families {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	fams := make(families, len(mfs))
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	return fams
}

// series returns the metrics of the family name with exactly the labels
// given as name, value pairs: there should be one or none.
func (fams families) series(name string, labels ...string) []*dto.Metric {
	var found []*dto.Metric
	mf := fams[name]
	if mf == nil {
		return nil
	}
	want := make(map[string]string, len(labels)/2)
	for i := 0; i < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range mf.GetMetric() {
		got := make(map[string]string, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(want) && equalMaps(got, want) {
			found = append(found, m)
		}
	}
	return found
}

func equalMaps(a, b map[string]string) bool {
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// value returns the value of the one counter or gauge of the family name
// with the labels given, failing the test if there is not exactly one.
func (fams families) value(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	ms := fams.series(name, labels...)
	require.Len(t, ms, 1, "%s%v", name, labels)
	switch fams[name].GetType() {
	case dto.MetricType_COUNTER:
		return ms[0].GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return ms[0].GetGauge().GetValue()
	}
	t.Fatalf("%s is a %v, not a counter or a gauge", name, fams[name].GetType())
	return 0
}

// histogram returns the one histogram of the family name with the labels
// given, or nil if there is none.
func (fams families) histogram(t testing.TB, name string, labels ...string) *dto.Histogram {
	t.Helper()
	ms := fams.series(name, labels...)
	require.LessOrEqual(t, len(ms), 1, "%s%v", name, labels)
	if len(ms) == 0 {
		return nil
	}
	require.Equal(t, dto.MetricType_HISTOGRAM, fams[name].GetType(), name)
	return ms[0].GetHistogram()
}

// agree checks that the metrics named prefix+... with the labels given
// show st: the pool's with prefix "workerpool_", a sub-pool's with
// "workerpool_subpool_" and its label. The histograms are checked too if
// timed; else there must be none.
func (fams families) agree(t testing.TB, st workerpool.Status, timed bool, prefix string, labels ...string) {
	t.Helper()
	type field struct {
		name string
		want float64
	}
	fields := []field{
		{"tasks_submitted_total", float64(st.Submitted)},
		{"tasks_completed_total", float64(st.Completed)},
		{"tasks_panicked_total", float64(st.Panicked)},
		{"tasks_rejected_total", float64(st.Rejected)},
		{"tasks_abandoned_total", float64(st.Abandoned)},
		{"tasks_canceled_total", float64(st.Canceled)},
		{"tasks_running", float64(st.Busy)},
		{"tasks_waiting", float64(st.Waiting)},
		{"tasks_paced", float64(st.Paced)},
		{"max_workers", float64(st.MaxWorkers)},
	}
	if prefix == "workerpool_" {
		fields = append(fields, field{"workers", float64(st.Workers)})
	} else {
		assert.Nil(t, fams.series(prefix+"workers", labels...), "no workers gauge for a sub-pool")
	}
	for _, f := range fields {
		assert.Equal(t, f.want, fams.value(t, prefix+f.name, labels...), "%s%s%v", prefix, f.name, labels)
	}
	for _, h := range []struct {
		name string
		want workerpool.Timing
	}{{"task_wait_seconds", st.Wait}, {"task_run_seconds", st.Run}} {
		got := fams.histogram(t, prefix+h.name, labels...)
		if !timed {
			assert.Nil(t, got, "%s%s%v without timings", prefix, h.name, labels)
			continue
		}
		if assert.NotNil(t, got, "%s%s%v with timings", prefix, h.name, labels) {
			sameTiming(t, got, h.want, prefix+h.name)
		}
	}
}

// sameTiming checks that h is tm: the same count and sum, and tm's buckets
// made cumulative, at the bounds of workerpool.TimingBounds in seconds.
func sameTiming(t testing.TB, h *dto.Histogram, tm workerpool.Timing, name string) {
	t.Helper()
	wellFormed(t, h, name)
	assert.Equal(t, tm.Count, h.GetSampleCount(), "%s count", name)
	assert.Equal(t, tm.Total.Seconds(), h.GetSampleSum(), "%s sum", name)
	var cum uint64
	for i, b := range h.GetBucket() {
		cum += tm.Buckets[i]
		assert.Equal(t, cum, b.GetCumulativeCount(), "%s bucket %v", name, b.GetUpperBound())
	}
}

// wellFormed checks that h is a histogram Prometheus can use: its buckets
// at the bounds of workerpool.TimingBounds in seconds, then +Inf, with
// counts that never fall, the last equal to the count.
func wellFormed(t testing.TB, h *dto.Histogram, name string) {
	t.Helper()
	bs := h.GetBucket()
	// The text format shows the +Inf bucket; a registry's Gather leaves it
	// implicit.
	if n := len(bs); n > 0 && math.IsInf(bs[n-1].GetUpperBound(), 1) {
		assert.Equal(t, h.GetSampleCount(), bs[n-1].GetCumulativeCount(), "%s: +Inf is the count", name)
		bs = bs[:n-1]
	}
	require.Len(t, bs, len(workerpool.TimingBounds), name)
	var last uint64
	for i, b := range bs {
		assert.Equal(t, workerpool.TimingBounds[i].Seconds(), b.GetUpperBound(), "%s bucket %d", name, i)
		assert.GreaterOrEqual(t, b.GetCumulativeCount(), last, "%s: cumulative", name)
		last = b.GetCumulativeCount()
	}
	assert.GreaterOrEqual(t, h.GetSampleCount(), last, "%s: the count holds every bucket", name)
}
