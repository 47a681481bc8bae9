package prom_test

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/prom"
)

func ExampleNewCollector() {
	p := workerpool.New(4)
	mail := p.Subpool("mail", 2)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCollector("jobs", p))
	// Serve it: http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	for range 3 {
		_ = mail.Submit(func() {})
	}
	_ = p.Submit(func() {})
	p.StopWait()

	mfs, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "workerpool_tasks_completed_total", "workerpool_subpool_tasks_completed_total":
			_, _ = expfmt.MetricFamilyToText(os.Stdout, mf)
		}
	}
	// Output:
	// # HELP workerpool_subpool_tasks_completed_total Tasks that finished running, panicked ones included.
	// # TYPE workerpool_subpool_tasks_completed_total counter
	// workerpool_subpool_tasks_completed_total{pool="jobs",subpool="mail"} 3
	// # HELP workerpool_tasks_completed_total Tasks that finished running, panicked ones included.
	// # TYPE workerpool_tasks_completed_total counter
	// workerpool_tasks_completed_total{pool="jobs"} 4
}
