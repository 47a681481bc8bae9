package prom_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/prom"
)

// BenchmarkGather measures what a scrape costs before encoding: the
// registry's Gather of one pool, with timings, and its sub-pools.
func BenchmarkGather(b *testing.B) {
	for _, subpools := range []int{0, 10, 100} {
		b.Run(fmt.Sprintf("subpools=%d", subpools), func(b *testing.B) {
			p := workerpool.New(4, workerpool.WithTaskTimings())
			defer p.StopWait()
			for i := range subpools {
				s := p.Subpool(fmt.Sprint("s", i), 1)
				if err := s.SubmitWait(func() {}); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.SubmitWait(func() {}); err != nil {
				b.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(prom.NewCollector("bench", p))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
