package main

import (
	"runtime/metrics"
	"time"
)

// samplerMethod says, for the report, how the peaks are measured.
const samplerMethod = "peaks sampled every 1 ms with runtime/metrics " +
	"(`/sched/goroutines:goroutines` and `/memory/classes/heap/objects:bytes`), " +
	"plus one sample after the pool's teardown; whole process, users included"

// A sampler records the peak goroutine count and heap size of the process,
// reading runtime/metrics, which does not stop the world, on a ticker.
type sampler struct {
	samples []metrics.Sample
	// Peaks, owned by the sampling goroutine until done is closed.
	goroutines, heap uint64
	stop, done       chan struct{}
}

// startSampler starts sampling every period until [sampler.Stop].
func startSampler(period time.Duration) *sampler {
	s := &sampler{
		samples: []metrics.Sample{
			{Name: "/sched/goroutines:goroutines"},
			{Name: "/memory/classes/heap/objects:bytes"},
		},
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	s.sample()
	go s.run(period)
	return s
}

func (s *sampler) run(period time.Duration) {
	defer close(s.done)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.sample()
		case <-s.stop:
			s.sample()
			return
		}
	}
}

func (s *sampler) sample() {
	metrics.Read(s.samples)
	s.goroutines = max(s.goroutines, s.samples[0].Value.Uint64())
	s.heap = max(s.heap, s.samples[1].Value.Uint64())
}

// Stop takes a last sample, stops the sampler and returns the peaks.
func (s *sampler) Stop() (goroutines, heapBytes uint64) {
	close(s.stop)
	<-s.done
	return s.goroutines, s.heap
}
