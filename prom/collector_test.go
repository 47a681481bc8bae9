package prom_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/prom"
)

func noop()   {}
func panics() { panic("test") }

// quiet keeps the default panic handler from logging the tests' panics,
// and keeps every worker through the tests, so that Workers stays put
// between a scrape and the Status it is checked against.
var quiet = []workerpool.Option{
	workerpool.WithPanicHandler(func(*workerpool.PanicError) {}),
	workerpool.WithIdleTimeout(-1),
}

// caughtUp returns once p's dispatcher has dealt with everything sent to
// it before, so that its Status is at rest. SubmitWait alone does not
// promise that: the dispatcher publishes the tasks waiting in its queue
// just after a worker takes one, and the worker may have run the task and
// released its SubmitWait first, so that for a moment Waiting still counts
// it. A Resize to the pool's size changes nothing, and returns once the
// dispatcher has handled it, after what it was doing.
func caughtUp(p *workerpool.Pool) { p.Resize(p.Size()) }

func options(extra ...workerpool.Option) []workerpool.Option {
	return append(append([]workerpool.Option(nil), quiet...), extra...)
}

// At rest, after SubmitWait or a stop, every metric of the pool and of
// each sub-pool is its field of Status: tasks run and panicked, then held
// by a pause, rejected by the full queue, and dropped by Stop.
func TestScrapeAgreesWithStatusAtRest(t *testing.T) {
	for _, timed := range []bool{false, true} {
		t.Run(fmt.Sprintf("timings=%v", timed), func(t *testing.T) {
			opts := options(workerpool.WithMaxWaiting(3), workerpool.WithOverflow(workerpool.Reject))
			if timed {
				opts = append(opts, workerpool.WithTaskTimings())
			}
			p := workerpool.New(2, opts...)
			mail := p.Subpool("mail", 1)
			news := p.Subpool("news", 2)
			url := serve(t, prom.NewCollector("jobs", p))
			check := func(fams families) {
				t.Helper()
				fams.agree(t, p.Status(), timed, "workerpool_", "pool", "jobs")
				fams.agree(t, mail.Status(), timed, "workerpool_subpool_", "pool", "jobs", "subpool", "mail")
				fams.agree(t, news.Status(), timed, "workerpool_subpool_", "pool", "jobs", "subpool", "news")
			}

			for range 5 {
				require.NoError(t, p.SubmitWait(noop))
				require.NoError(t, mail.SubmitWait(noop))
				require.NoError(t, news.SubmitWait(noop))
			}
			require.Error(t, p.SubmitWait(panics))
			require.Error(t, mail.SubmitWait(panics))
			caughtUp(p)
			fams := scrape(t, url)
			check(fams)
			assert.Equal(t, 17.0, fams.value(t, "workerpool_tasks_completed_total", "pool", "jobs"))
			assert.Equal(t, 2.0, fams.value(t, "workerpool_tasks_panicked_total", "pool", "jobs"))
			assert.Equal(t, 1.0, fams.value(t, "workerpool_subpool_tasks_panicked_total", "pool", "jobs", "subpool", "mail"))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p.Pause(ctx)
			require.NoError(t, p.Submit(noop))
			require.NoError(t, mail.Submit(noop))
			require.NoError(t, news.Submit(noop))
			require.ErrorIs(t, mail.TrySubmit(noop), workerpool.ErrQueueFull)
			require.ErrorIs(t, p.TrySubmit(noop), workerpool.ErrQueueFull)
			caughtUp(p)
			fams = scrape(t, url)
			check(fams)
			assert.Equal(t, 3.0, fams.value(t, "workerpool_tasks_waiting", "pool", "jobs"))
			assert.Equal(t, 2.0, fams.value(t, "workerpool_tasks_rejected_total", "pool", "jobs"))
			assert.Equal(t, 1.0, fams.value(t, "workerpool_subpool_tasks_waiting", "pool", "jobs", "subpool", "mail"))

			require.Len(t, p.Stop(), 3)
			fams = scrape(t, url)
			check(fams)
			assert.Equal(t, 3.0, fams.value(t, "workerpool_tasks_abandoned_total", "pool", "jobs"))
			assert.Equal(t, 1.0, fams.value(t, "workerpool_subpool_tasks_abandoned_total", "pool", "jobs", "subpool", "news"))
		})
	}
}

// On the fake clock every field is exact, Canceled included, and each
// duration lands in the bucket whose bound in seconds is its own: a bound
// holds the durations equal to it.
func TestEveryFieldIsExactOnTheFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(1, options(workerpool.WithTaskTimings(),
			workerpool.WithMaxWaiting(3), workerpool.WithOverflow(workerpool.Reject))...)
		mail := p.Subpool("mail", 1)
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(prom.NewCollector("jobs", p))
		sleep := func(d time.Duration) func() { return func() { time.Sleep(d) } }

		require.NoError(t, p.SubmitWait(sleep(time.Millisecond)))
		require.Error(t, mail.SubmitWait(func() { time.Sleep(2500 * time.Microsecond); panic("test") }))
		require.NoError(t, p.Submit(sleep(3*time.Second)))
		require.NoError(t, mail.Submit(noop)) // waits 3s
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		g := mail.Group(ctx)
		g.Go(func(context.Context) error { return nil })
		cancel() // the group gives its task up: canceled
		assert.Error(t, g.Wait())
		synctest.Wait()
		require.NoError(t, p.Submit(noop)) // waits 3s
		require.NoError(t, p.Submit(noop)) // the queue is full
		require.ErrorIs(t, mail.TrySubmit(noop), workerpool.ErrQueueFull)
		synctest.Wait()
		fams := gather(t, reg)
		fams.agree(t, p.Status(), true, "workerpool_", "pool", "jobs")
		fams.agree(t, mail.Status(), true, "workerpool_subpool_", "pool", "jobs", "subpool", "mail")
		for name, want := range map[string]float64{
			"workerpool_tasks_submitted_total": 7, "workerpool_tasks_completed_total": 2,
			"workerpool_tasks_panicked_total": 1, "workerpool_tasks_rejected_total": 1,
			"workerpool_tasks_canceled_total": 1, "workerpool_tasks_running": 1,
			"workerpool_tasks_waiting": 3, "workerpool_workers": 1, "workerpool_max_workers": 1,
		} {
			assert.Equal(t, want, fams.value(t, name, "pool", "jobs"), name)
		}
		for name, want := range map[string]float64{
			"workerpool_subpool_tasks_submitted_total": 3, "workerpool_subpool_tasks_canceled_total": 1,
			"workerpool_subpool_tasks_rejected_total": 1, "workerpool_subpool_tasks_waiting": 1,
			"workerpool_subpool_max_workers": 1,
		} {
			assert.Equal(t, want, fams.value(t, name, "pool", "jobs", "subpool", "mail"), name)
		}
		run := fams.histogram(t, "workerpool_task_run_seconds", "pool", "jobs")
		require.NotNil(t, run)
		assert.Equal(t, uint64(2), run.GetSampleCount())
		assert.InDelta(t, 0.0035, run.GetSampleSum(), 1e-12)
		cumulative := map[float64]uint64{}
		for _, b := range run.GetBucket() {
			cumulative[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		assert.Equal(t, uint64(0), cumulative[0.0005])
		assert.Equal(t, uint64(1), cumulative[0.001], "1ms is in le=0.001")
		assert.Equal(t, uint64(2), cumulative[0.0025], "2.5ms is in le=0.0025")
		assert.Equal(t, uint64(2), cumulative[300])

		require.Len(t, p.Stop(), 3)
		fams = gather(t, reg)
		fams.agree(t, p.Status(), true, "workerpool_", "pool", "jobs")
		fams.agree(t, mail.Status(), true, "workerpool_subpool_", "pool", "jobs", "subpool", "mail")
		assert.Equal(t, 3.0, fams.value(t, "workerpool_tasks_abandoned_total", "pool", "jobs"))
		assert.Equal(t, 3.0, fams.value(t, "workerpool_tasks_completed_total", "pool", "jobs"))
		wait := fams.histogram(t, "workerpool_task_wait_seconds", "pool", "jobs")
		require.NotNil(t, wait)
		assert.Equal(t, uint64(3), wait.GetSampleCount(), "the abandoned tasks never started")
		assert.Equal(t, 0.0, wait.GetSampleSum(), "the pool was free for the tasks that ran")
	})
}

func TestASubpoolMadeAfterRegistrationAppears(t *testing.T) {
	p := workerpool.New(2, quiet...)
	defer p.StopWait()
	url := serve(t, prom.NewCollector("jobs", p))
	fams := scrape(t, url)
	assert.Nil(t, fams["workerpool_subpool_tasks_submitted_total"], "no sub-pool yet")

	late := p.Subpool("late", 3)
	require.NoError(t, late.SubmitWait(noop))
	fams = scrape(t, url)
	fams.agree(t, late.Status(), false, "workerpool_subpool_", "pool", "jobs", "subpool", "late")
	assert.Equal(t, 1.0, fams.value(t, "workerpool_subpool_tasks_completed_total", "pool", "jobs", "subpool", "late"))
	assert.Equal(t, 3.0, fams.value(t, "workerpool_subpool_max_workers", "pool", "jobs", "subpool", "late"))
}

// Two pools in one registry differ by their label pool; a second
// collector of the same name cannot register.
func TestTwoPoolsShareARegistry(t *testing.T) {
	a := workerpool.New(2, options(workerpool.WithTaskTimings())...)
	defer a.StopWait()
	b := workerpool.New(3, quiet...)
	defer b.StopWait()
	aMail, bMail := a.Subpool("mail", 1), b.Subpool("mail", 2)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(prom.NewCollector("a", a)))
	require.NoError(t, reg.Register(prom.NewCollector("b", b)))
	var dup prometheus.AlreadyRegisteredError
	require.ErrorAs(t, reg.Register(prom.NewCollector("a", b)), &dup, "one name, one pool")
	url := serve(t, prom.NewCollector("a", a), prom.NewCollector("b", b))

	require.NoError(t, a.SubmitWait(noop))
	require.NoError(t, aMail.SubmitWait(noop))
	for range 3 {
		require.NoError(t, bMail.SubmitWait(noop))
	}
	caughtUp(a)
	caughtUp(b)
	fams := scrape(t, url)
	fams.agree(t, a.Status(), true, "workerpool_", "pool", "a")
	fams.agree(t, b.Status(), false, "workerpool_", "pool", "b")
	fams.agree(t, aMail.Status(), true, "workerpool_subpool_", "pool", "a", "subpool", "mail")
	fams.agree(t, bMail.Status(), false, "workerpool_subpool_", "pool", "b", "subpool", "mail")
	assert.Equal(t, 2.0, fams.value(t, "workerpool_tasks_completed_total", "pool", "a"))
	assert.Equal(t, 3.0, fams.value(t, "workerpool_tasks_completed_total", "pool", "b"))
	assert.Equal(t, 3.0, fams.value(t, "workerpool_max_workers", "pool", "b"))
}

// A sub-pool whose stop has begun frees its name, and a new sub-pool of
// that name is listed beside it until its stop returns: the two make one
// series, of their sums. The stopped one leaves the sum, and the series
// goes with the last of its name.
func TestSubpoolsOfOneNameMakeOneSeriesOfTheirSums(t *testing.T) {
	p := workerpool.New(4, options(workerpool.WithTaskTimings())...)
	old := p.Subpool("mail", 2)
	news := p.Subpool("news", 1)
	url := serve(t, prom.NewCollector("jobs", p))
	mail := []string{"pool", "jobs", "subpool", "mail"}

	for range 2 {
		require.NoError(t, old.SubmitWait(noop))
	}
	release := make(chan struct{})
	require.NoError(t, old.Submit(func() { <-release }))
	stopped := make(chan struct{})
	go func() { old.StopWait(); close(stopped) }()
	var renewed *workerpool.Subpool
	require.Eventually(t, func() bool { renewed = p.Subpool("mail", 3); return renewed != old },
		10*time.Second, time.Millisecond, "the name is free once the old one's stop began")
	for range 3 {
		require.NoError(t, renewed.SubmitWait(noop))
	}
	require.Error(t, renewed.SubmitWait(panics))
	require.NoError(t, news.SubmitWait(noop))
	fams := scrape(t, url)
	assert.Len(t, fams.series("workerpool_subpool_tasks_submitted_total", mail...), 1, "one series for the name")
	assert.Equal(t, 7.0, fams.value(t, "workerpool_subpool_tasks_submitted_total", mail...), "3 + 4")
	assert.Equal(t, 6.0, fams.value(t, "workerpool_subpool_tasks_completed_total", mail...), "2 + 4")
	assert.Equal(t, 1.0, fams.value(t, "workerpool_subpool_tasks_panicked_total", mail...))
	assert.Equal(t, 5.0, fams.value(t, "workerpool_subpool_max_workers", mail...), "2 + 3")
	run := fams.histogram(t, "workerpool_subpool_task_run_seconds", mail...)
	require.NotNil(t, run)
	assert.Equal(t, uint64(6), run.GetSampleCount())
	assert.InDelta(t, (old.Status().Run.Total + renewed.Status().Run.Total).Seconds(), run.GetSampleSum(), 1e-12)
	wellFormed(t, run, "mail run")
	fams.agree(t, news.Status(), true, "workerpool_subpool_", "pool", "jobs", "subpool", "news")

	close(release)
	<-stopped
	fams = scrape(t, url)
	assert.Equal(t, 4.0, fams.value(t, "workerpool_subpool_tasks_completed_total", mail...), "the renewed one's 4: the stopped one left")
	assert.Equal(t, 3.0, fams.value(t, "workerpool_subpool_max_workers", mail...))
	assert.Equal(t, 8.0, fams.value(t, "workerpool_tasks_completed_total", "pool", "jobs"), "the pool still counts every task")

	renewed.StopWait()
	fams = scrape(t, url)
	assert.Empty(t, fams.series("workerpool_subpool_tasks_completed_total", mail...), "the last of its name stopped: the series went")
	p.StopWait()
}

// A name that is not valid UTF-8 would fail the whole scrape as a label:
// its invalid bytes become U+FFFD.
func TestASubpoolNameThatIsNotUTF8IsMended(t *testing.T) {
	p := workerpool.New(1, quiet...)
	defer p.StopWait()
	require.NoError(t, p.Subpool("bad\xff", 1).SubmitWait(noop))
	require.NoError(t, p.Subpool("bad\uFFFD", 1).SubmitWait(noop))
	fams := scrape(t, serve(t, prom.NewCollector("jobs", p)))
	assert.Equal(t, 2.0, fams.value(t, "workerpool_subpool_tasks_completed_total", "pool", "jobs", "subpool", "bad\uFFFD"))
}

// With timings, the histograms are there from the first scrape, at zero
// until a task is timed, with every sub-pool's; without, never.
func TestHistogramsOnlyWithTimings(t *testing.T) {
	histograms := func(fams families) (names []string) {
		for name := range fams {
			if fams[name].GetType().String() == "HISTOGRAM" {
				names = append(names, name)
			}
		}
		return names
	}
	all := []string{
		"workerpool_task_run_seconds", "workerpool_task_wait_seconds",
		"workerpool_subpool_task_run_seconds", "workerpool_subpool_task_wait_seconds",
	}

	t.Run("off", func(t *testing.T) {
		p := workerpool.New(2, quiet...)
		defer p.StopWait()
		mail := p.Subpool("mail", 1)
		url := serve(t, prom.NewCollector("jobs", p))
		require.NoError(t, p.SubmitWait(noop))
		require.NoError(t, mail.SubmitWait(noop))
		assert.Empty(t, histograms(scrape(t, url)))
	})
	t.Run("on", func(t *testing.T) {
		p := workerpool.New(2, options(workerpool.WithTaskTimings())...)
		defer p.StopWait()
		mail := p.Subpool("mail", 1)
		url := serve(t, prom.NewCollector("jobs", p))
		fams := scrape(t, url)
		assert.ElementsMatch(t, all, histograms(fams), "at zero before the first task")
		assert.Zero(t, fams.histogram(t, "workerpool_task_run_seconds", "pool", "jobs").GetSampleCount())

		require.NoError(t, p.SubmitWait(noop))
		idle := p.Subpool("idle", 1)
		caughtUp(p)
		fams = scrape(t, url)
		assert.ElementsMatch(t, all, histograms(fams))
		fams.agree(t, p.Status(), true, "workerpool_", "pool", "jobs")
		fams.agree(t, mail.Status(), true, "workerpool_subpool_", "pool", "jobs", "subpool", "mail")
		fams.agree(t, idle.Status(), true, "workerpool_subpool_", "pool", "jobs", "subpool", "idle")
		assert.Zero(t, fams.histogram(t, "workerpool_subpool_task_run_seconds", "pool", "jobs", "subpool", "idle").GetSampleCount())
	})
}

func TestMetricsAreLintClean(t *testing.T) {
	p := workerpool.New(2, options(workerpool.WithTaskTimings())...)
	defer p.StopWait()
	mail := p.Subpool("mail", 1)
	require.NoError(t, p.SubmitWait(noop))
	require.NoError(t, mail.SubmitWait(noop))
	c := prom.NewCollector("jobs", p)
	n, err := testutil.GatherAndCount(func() prometheus.Gatherer {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		return reg
	}())
	require.NoError(t, err)
	require.Equal(t, 13+12, n, "the pool's 11 and 2 histograms, the sub-pool's 10 and 2: all linted")
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// While submitters keep the pool busy, from many goroutines and with new
// sub-pools coming, a loop of scrapes each completes and sees well-formed
// histograms and counters that never fall, and submissions go on
// meanwhile: a scrape reads atomics and never waits for the dispatcher.
// The race detector watches it all.
func TestScrapesDuringHeavySubmissionBlockNothing(t *testing.T) {
	p := workerpool.New(4, options(workerpool.WithTaskTimings(), workerpool.WithMaxWaiting(256))...)
	subs := []*workerpool.Subpool{p.Subpool("a", 2), p.Subpool("b", 1)}
	url := serve(t, prom.NewCollector("load", p))

	stop := make(chan struct{})
	var submitted atomic.Uint64
	var submitters sync.WaitGroup
	for i := range 3 { // one for the pool's queue, one for each sub-pool's, at first
		submitters.Go(func() {
			for n := i; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				switch n % 3 {
				case 0:
					err = p.Submit(noop)
				default:
					err = subs[n%3-1].Submit(noop)
				}
				if !assert.NoError(t, err) {
					return
				}
				submitted.Add(1)
			}
		})
	}

	const scrapes = 12
	late := 0                    // tasks of the sub-pools made under load
	last := map[string]float64{} // each counter series at the last scrape
	advanced := 0                // scrapes during which submissions went on
	for i := range scrapes {
		if i%3 == 0 {
			// A sub-pool made under load; the names repeat, so that
			// several sum up into one series.
			s := p.Subpool(fmt.Sprintf("late%d", i%6), 1)
			require.NoError(t, s.Submit(noop))
			late++
		}
		before := submitted.Load()
		fams := scrape(t, url)
		if submitted.Load() > before {
			advanced++
		}
		for name, mf := range fams {
			for _, m := range mf.GetMetric() {
				switch {
				case m.GetHistogram() != nil:
					wellFormed(t, m.GetHistogram(), name)
				case m.GetCounter() != nil:
					key := name + fmt.Sprint(m.GetLabel())
					assert.GreaterOrEqual(t, m.GetCounter().GetValue(), last[key], "%s never falls", key)
					last[key] = m.GetCounter().GetValue()
				}
			}
		}
	}
	close(stop)
	submitters.Wait()
	t.Logf("%d submissions; in %d of %d scrapes submissions went on", submitted.Load(), advanced, scrapes)
	assert.Positive(t, advanced, "submissions went on during scrapes")

	p.StopWait()
	fams := scrape(t, url)
	fams.agree(t, p.Status(), true, "workerpool_", "pool", "load")
	assert.Equal(t, float64(submitted.Load())+float64(late), fams.value(t, "workerpool_tasks_completed_total", "pool", "load"),
		"every submission, and the late sub-pools' tasks, ran")
	for _, s := range subs {
		fams.agree(t, s.Status(), true, "workerpool_subpool_", "pool", "load", "subpool", s.Name())
	}
}

func TestNewCollectorPanicsOnANilPool(t *testing.T) {
	assert.PanicsWithValue(t, "prom: NewCollector: the pool is nil", func() { prom.NewCollector("x", nil) })
}

func TestPacedTasksAndWaitsByLevelAreExported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2, workerpool.WithTaskTimings())
		mail := p.Subpool("mail", 2)
		mail.SetRate(workerpool.Every(time.Second), 1)
		urgent := mail.Priority(3)
		c := prom.NewCollector("jobs", p)
		for range 3 {
			require.NoError(t, urgent.Submit(noop))
		}
		synctest.Wait()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP workerpool_subpool_tasks_paced Tasks waiting that a rate holds back.
# TYPE workerpool_subpool_tasks_paced gauge
workerpool_subpool_tasks_paced{pool="jobs",subpool="mail"} 2
# HELP workerpool_tasks_paced Tasks waiting that a rate holds back.
# TYPE workerpool_tasks_paced gauge
workerpool_tasks_paced{pool="jobs"} 2
`), "workerpool_tasks_paced", "workerpool_subpool_tasks_paced"))
		p.StopWait()
		fams, err := reg.Gather()
		require.NoError(t, err)
		counts := map[string]uint64{}
		for _, f := range fams {
			if !strings.HasSuffix(f.GetName(), "task_level_wait_seconds") {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "level" {
						counts[f.GetName()+"/"+l.GetValue()] = m.GetHistogram().GetSampleCount()
					}
				}
			}
		}
		assert.Equal(t, map[string]uint64{
			"workerpool_task_level_wait_seconds/0": 0, "workerpool_task_level_wait_seconds/3": 3,
			"workerpool_subpool_task_level_wait_seconds/0": 0, "workerpool_subpool_task_level_wait_seconds/3": 3,
		}, counts)
		problems, err := testutil.CollectAndLint(c)
		require.NoError(t, err)
		assert.Empty(t, problems)
	})
}
