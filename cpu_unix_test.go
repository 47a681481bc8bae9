//go:build unix

package workerpool_test

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU adds a cpu-ns/op metric to b: the process's user and system
// CPU time from now until b ends, per op. Unlike ns/op it barely moves when
// other processes compete for the cores, so it compares designs fairly on a
// shared machine; ns/op remains the figure a user sees.
func reportCPU(b *testing.B) {
	start := cpuTime()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		}
	})
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
