package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ours "github.com/dispatchkit/workerpool"
)

// BenchmarkShape runs a workload's shape on one pool: users goroutines
// submit b.N tasks between them, then Close. For profiling against the
// floor: go test -bench 'Shape/tiny-1/' -cpuprofile cpu.out
func BenchmarkShape(b *testing.B) {
	tinyIters = 20
	for _, wk := range []struct {
		name       string
		users, max int
		wait       bool
	}{
		{"tiny-1", 1, 100, false},
		{"tiny-100", 100, 100, false},
		{"wait", 100, 8, true},
		{"sleep-1", 1, 10000, false},
		{"sleep-1k", 1000, 10000, false},
	} {
		for _, name := range []string{"ours", "ours-noreap", "floor-buffered", "floor-direct", "gammazero"} {
			p, _ := findPeer(name)
			if name == "ours-noreap" {
				p = peer{name: name, new: func(n int, task func()) pool {
					return &oursPool{ours.New(n, ours.WithIdleTimeout(-1)), task}
				}}
			}
			b.Run(wk.name+"/"+name, func(b *testing.B) {
				task := taskFunc(tiny)
				if wk.name == "sleep-1" || wk.name == "sleep-1k" {
					task = taskFunc(sleep)
				}
				pl := p.new(wk.max, task)
				var wg sync.WaitGroup
				per := b.N / wk.users
				var ru0 syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
				cpu0 := time.Duration(ru0.Utime.Nano() + ru0.Stime.Nano())
				b.ResetTimer()
				for range wk.users {
					wg.Go(func() {
						for range per {
							if wk.wait {
								pl.GoWait()
							} else {
								pl.Go()
							}
						}
					})
				}
				wg.Wait()
				pl.Close()
				b.StopTimer()
				var ru syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
				cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
				b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestOneWorkload runs one measurement as a child would, in this fresh
// process, when PROF=pool:workload is set: for profiling with -cpuprofile.
func TestOneWorkload(t *testing.T) {
	spec := os.Getenv("PROF")
	if spec == "" {
		t.Skip("PROF=pool:workload not set")
	}
	name, work, _ := strings.Cut(spec, ":")
	p, err := findPeer(name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := findWorkload(work)
	if err != nil {
		t.Fatal(err)
	}
	tinyIters, cpuIters = 20, 500
	reps, _ := strconv.Atoi(os.Getenv("REPS"))
	for range max(reps, 1) {
		start := time.Now()
		if err := runChild(p, w, false); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", time.Since(start))
	}
}
