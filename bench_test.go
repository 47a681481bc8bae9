package workerpool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/dispatchkit/workerpool"
)

// The benchmarks submit one prepared func, made once outside the timed loop,
// so that allocs/op measures the pool and not the caller's closure.
//
// Unless a comment says otherwise, the timing covers the b.N submissions and
// the StopWait that runs them all, so ns/op is the pool's throughput per
// task, not just the cost of handing a task over; New is not timed.

// BenchmarkSubmit measures fire-and-forget submission from one goroutine at
// several pool sizes. Workers start on demand during the loop, so their
// start-up cost (a goroutine, a channel, the idle ticker) is amortized over
// b.N; at steady state Submit allocates nothing.
func BenchmarkSubmit(b *testing.B) {
	for _, n := range []int{1, 4, 64, 1024} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var sum atomic.Int64
			task := func() { sum.Add(1) }
			p := workerpool.New(n)
			b.ResetTimer()
			for range b.N {
				if err := p.Submit(task); err != nil {
					b.Fatal(err)
				}
			}
			p.StopWait()
			b.StopTimer()
			if got := sum.Load(); got != int64(b.N) {
				b.Fatalf("ran %d tasks, want %d", got, b.N)
			}
		})
	}

	// Every task goes through the waiting queue: the pool is paused while
	// b.N tasks are submitted, then resumed and drained. The queue grows
	// by doubling, so its allocations are amortized: O(log b.N) per run,
	// which rounds to 0 allocs/op, but B/op shows the copying.
	b.Run("queued/workers=1", func(b *testing.B) {
		b.ReportAllocs()
		var sum atomic.Int64
		task := func() { sum.Add(1) }
		p := workerpool.New(1)
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		b.ResetTimer()
		for range b.N {
			if err := p.Submit(task); err != nil {
				b.Fatal(err)
			}
		}
		resume()
		p.StopWait()
		b.StopTimer()
		if got := sum.Load(); got != int64(b.N) {
			b.Fatalf("ran %d tasks, want %d", got, b.N)
		}
	})

	// A bounded queue under load: the submitter is throttled to the
	// worker's pace (Block) and the queue never grows past 64.
	b.Run("bounded=64/workers=1", func(b *testing.B) {
		b.ReportAllocs()
		var sum atomic.Int64
		task := func() { sum.Add(1) }
		p := workerpool.New(1, workerpool.WithMaxWaiting(64))
		b.ResetTimer()
		for range b.N {
			if err := p.Submit(task); err != nil {
				b.Fatal(err)
			}
		}
		p.StopWait()
		b.StopTimer()
		if got := sum.Load(); got != int64(b.N) {
			b.Fatalf("ran %d tasks, want %d", got, b.N)
		}
	})
}

// BenchmarkSubmitParallel measures Submit from GOMAXPROCS goroutines at
// once, all contending for the one dispatcher.
func BenchmarkSubmitParallel(b *testing.B) {
	for _, n := range []int{4, 64} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var sum atomic.Int64
			task := func() { sum.Add(1) }
			p := workerpool.New(n)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := p.Submit(task); err != nil {
						b.Error(err)
						return
					}
				}
			})
			p.StopWait()
			b.StopTimer()
			if got := sum.Load(); got != int64(b.N) {
				b.Fatalf("ran %d tasks, want %d", got, b.N)
			}
		})
	}
}

// BenchmarkSubmitWait measures the round trip of SubmitWait: hand-off, run
// and the wake-up of the caller. Each call allocates its waiter and the
// channel that releases the caller.
func BenchmarkSubmitWait(b *testing.B) {
	b.Run("serial/workers=4", func(b *testing.B) {
		b.ReportAllocs()
		var sum atomic.Int64
		task := func() { sum.Add(1) }
		p := workerpool.New(4)
		b.ResetTimer()
		for range b.N {
			if err := p.SubmitWait(task); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		p.StopWait()
	})
	b.Run("parallel/workers=4", func(b *testing.B) {
		b.ReportAllocs()
		var sum atomic.Int64
		task := func() { sum.Add(1) }
		p := workerpool.New(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := p.SubmitWait(task); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		p.StopWait()
	})
}

// BenchmarkStartStop measures a pool's whole life without tasks: New, and
// the Stop or StopWait that waits for its goroutines to exit.
func BenchmarkStartStop(b *testing.B) {
	b.Run("New+Stop", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			p := workerpool.New(8)
			p.Stop()
		}
	})
	b.Run("MinWorkers=4/New+StopWait", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			p := workerpool.New(8, workerpool.WithMinWorkers(4))
			p.StopWait()
		}
	})
}
