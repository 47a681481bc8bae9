package workerpool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
)

// The benchmarks submit one prepared func, made once outside the timed loop,
// so that allocs/op measures the pool and not the caller's closure.

// benchSubmit times b.N Submits of a tiny task to p, from one goroutine or
// from GOMAXPROCS at once, plus the StopWait that runs them all: ns/op is
// the pool's throughput per task, not just the cost of a hand-off. New is
// not timed; submitted, if not nil, runs (timed) after the last Submit.
// It fails unless every task ran exactly once.
func benchSubmit(b *testing.B, p *workerpool.Pool, parallel bool, submitted func()) {
	benchSubmitTo(b, p, func(_ int, task func()) error { return p.Submit(task) }, parallel, submitted)
}

// benchSubmitTo is benchSubmit with each task submitted by submitTo, which
// is told the submission's number i, counting from 1 (a key's pick, say).
func benchSubmitTo(b *testing.B, p *workerpool.Pool, submitTo func(i int, task func()) error, parallel bool, submitted func()) {
	b.ReportAllocs()
	reportCPU(b)
	var ran atomic.Int64
	task := func() { ran.Add(1) }
	var next atomic.Int64 // numbers the submissions, for submitTo
	submit := func() bool {
		if err := submitTo(int(next.Add(1)), task); err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && submit() {
			}
		})
	} else {
		for i := 0; i < b.N && submit(); i++ {
		}
	}
	if submitted != nil {
		submitted()
	}
	p.StopWait()
	b.StopTimer()
	if got := ran.Load(); got != int64(b.N) {
		b.Fatalf("ran %d tasks, want %d", got, b.N)
	}
}

// BenchmarkSubmit measures fire-and-forget submission from one goroutine.
// Workers start on demand during the loop, so their start-up cost is
// amortized over b.N; at steady state Submit allocates nothing.
func BenchmarkSubmit(b *testing.B) {
	for _, n := range []int{1, 4, 64, 1024} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			benchSubmit(b, workerpool.New(n), false, nil)
		})
	}

	// Every task goes through the waiting queue: the pool is paused while
	// b.N tasks are submitted, then resumed and drained. The queue grows
	// by doubling, so its allocations are amortized: O(log b.N) per run,
	// which rounds to 0 allocs/op, but B/op shows the copying.
	b.Run("queued/workers=1", func(b *testing.B) {
		p := workerpool.New(1)
		ctx, resume := context.WithCancel(context.Background())
		p.Pause(ctx)
		benchSubmit(b, p, false, resume)
	})

	// A bounded queue under load: the submitter is throttled to the
	// worker's pace (Block) and the queue never grows past 64.
	b.Run("bounded=64/workers=1", func(b *testing.B) {
		benchSubmit(b, workerpool.New(1, workerpool.WithMaxWaiting(64)), false, nil)
	})
}

// BenchmarkTaskTimings measures what WithTaskTimings costs a task: Submit
// of a tiny task on 4 workers, with and without it.
func BenchmarkTaskTimings(b *testing.B) {
	b.Run("off/workers=4", func(b *testing.B) {
		benchSubmit(b, workerpool.New(4), false, nil)
	})
	b.Run("on/workers=4", func(b *testing.B) {
		benchSubmit(b, workerpool.New(4, workerpool.WithTaskTimings()), false, nil)
	})
}

// BenchmarkSubmitParallel measures Submit from GOMAXPROCS goroutines at
// once, all contending for the one dispatcher.
func BenchmarkSubmitParallel(b *testing.B) {
	for _, n := range []int{4, 64} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			benchSubmit(b, workerpool.New(n), true, nil)
		})
	}
}

// BenchmarkSubmitWait measures the round trip of SubmitWait: hand-off, run
// and the wake-up of the caller. Each call allocates its waiter.
func BenchmarkSubmitWait(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := map[bool]string{false: "serial", true: "parallel"}[parallel]
		b.Run(name+"/workers=4", func(b *testing.B) {
			b.ReportAllocs()
			reportCPU(b)
			task := func() {}
			p := workerpool.New(4)
			defer p.StopWait()
			submitWait := func() {
				if err := p.SubmitWait(task); err != nil {
					b.Fatal(err)
				}
			}
			if parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						submitWait()
					}
				})
				return
			}
			for range b.N {
				submitWait()
			}
		})
	}
}

// BenchmarkStartStop measures a pool's whole life without tasks: New, and
// the Stop or StopWait that waits for its goroutines to exit.
func BenchmarkStartStop(b *testing.B) {
	b.Run("New+Stop", func(b *testing.B) {
		b.ReportAllocs()
		reportCPU(b)
		for range b.N {
			p := workerpool.New(8)
			p.Stop()
		}
	})
	b.Run("New+StopWait", func(b *testing.B) {
		b.ReportAllocs()
		reportCPU(b)
		for range b.N {
			p := workerpool.New(8)
			p.StopWait()
		}
	})
	b.Run("MinWorkers=4/New+StopWait", func(b *testing.B) {
		b.ReportAllocs()
		reportCPU(b)
		for range b.N {
			p := workerpool.New(8, workerpool.WithMinWorkers(4))
			p.StopWait()
		}
	})
}

// BenchmarkSubpool compares Submit to a sub-pool with Submit to the pool
// itself, on the same number of workers: the sub-pool's limit is the
// pool's maximum, so only the cost of its lane shows.
func BenchmarkSubpool(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("pool/workers=%d", n), func(b *testing.B) {
			benchSubmit(b, workerpool.New(n), false, nil)
		})
		b.Run(fmt.Sprintf("subpool/workers=%d", n), func(b *testing.B) {
			p := workerpool.New(n)
			s := p.Subpool("bench", n)
			benchSubmitTo(b, p, func(_ int, task func()) error { return s.Submit(task) }, false, nil)
		})
	}
}

// BenchmarkIdleSubpool compares Submit to a pool with an idle sub-pool
// (made, never used), and with an idle sub-pool that has a rate, against
// Submit to a pool without one: what a sub-pool, and a rate on it, cost
// the pool's own tasks while it has nothing to do.
func BenchmarkIdleSubpool(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("none/workers=%d", n), func(b *testing.B) {
			benchSubmit(b, workerpool.New(n), false, nil)
		})
		b.Run(fmt.Sprintf("idle/workers=%d", n), func(b *testing.B) {
			p := workerpool.New(n)
			p.Subpool("idle", 1)
			benchSubmit(b, p, false, nil)
		})
		b.Run(fmt.Sprintf("idle-rated/workers=%d", n), func(b *testing.B) {
			// A rate on the idle sub-pool, and on its keys: the pool reads
			// no clock for its own tasks, and never goes through pacing.
			p := workerpool.New(n)
			s := p.Subpool("idle", 1)
			s.SetRate(10, 1)
			s.SetKeyRate(1, 1)
			benchSubmit(b, p, false, nil)
		})
	}
}

// BenchmarkSubpoolLimit1 measures Submit to a sub-pool of limit 1, whose
// tasks queue behind each other, on a pool of 4: compare it with
// BenchmarkSubpool/pool/workers=4.
func BenchmarkSubpoolLimit1(b *testing.B) {
	p := workerpool.New(4)
	s := p.Subpool("one", 1)
	benchSubmitTo(b, p, func(_ int, task func()) error { return s.Submit(task) }, false, nil)
}

// BenchmarkSubmitKey measures SubmitKey with many distinct keys (each task
// its own, from a set of 65536) and with a few hot keys (4), whose tasks
// queue behind each other. The keys are made before the timer starts. As
// in [BenchmarkSubmit], ns/op includes running every task.
// With distinct keys, idle-B/key is the heap the pool holds once every
// task has ended, less what it held warm before the run, per key used:
// what a finished key costs, which is 0 but for a fixed cache of unused
// key lines (spread over 4 hot keys, that cache would swamp the figure).
// It is measured with the timer stopped, before the pool is stopped.
func BenchmarkSubmitKey(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	for _, c := range []struct {
		name string
		keys int
	}{{"distinct", len(keys)}, {"hot=4", 4}} {
		b.Run(c.name+"/workers=4", func(b *testing.B) {
			p := workerpool.New(4)
			if err := p.SubmitWait(func() {}); err != nil { // a worker up
				b.Fatal(err)
			}
			var idle func() // measures idle-B/key, with distinct keys
			if c.keys == len(keys) {
				before := liveHeap()
				idle = func() {
					// Timed, as StopWait would be: the tasks' run.
					for p.Status().Completed < uint64(b.N)+1 {
						time.Sleep(time.Millisecond)
					}
					b.StopTimer()
					after := liveHeap()
					perKey := max(float64(after)-float64(before), 0) / float64(min(b.N, c.keys))
					b.ReportMetric(perKey, "idle-B/key")
					b.StartTimer()
				}
			}
			benchSubmitTo(b, p, func(i int, task func()) error {
				return p.SubmitKey(keys[i%c.keys], task)
			}, false, idle)
		})
	}
}

// ---------------------------------------------------------------------------
// The benchmarks of futures, groups and Map pass prepared funcs, made once
// outside the timed loop, so that allocs/op measures the library and not
// the caller's closures.

// BenchmarkGo measures a Future's round trip, Go then Wait, from one
// goroutine and from GOMAXPROCS at once; each allocates its Future.
func BenchmarkGo(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := map[bool]string{false: "serial", true: "parallel"}[parallel]
		b.Run(name+"/workers=4", func(b *testing.B) {
			b.ReportAllocs()
			p := workerpool.New(4)
			defer p.StopWait()
			fn := func() (int, error) { return 1, nil }
			goWait := func() {
				if _, err := workerpool.Go(p, fn).Wait(); err != nil {
					b.Fatal(err)
				}
			}
			if parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						goWait()
					}
				})
				return
			}
			for range b.N {
				goWait()
			}
		})
	}
	// Many Futures in flight: Go b.N times, then Wait for each.
	b.Run("batch/workers=4", func(b *testing.B) {
		b.ReportAllocs()
		p := workerpool.New(4)
		defer p.StopWait()
		fn := func() (int, error) { return 1, nil }
		futures := make([]*workerpool.Future[int], b.N)
		b.ResetTimer()
		for i := range futures {
			futures[i] = workerpool.Go(p, fn)
		}
		for _, f := range futures {
			if _, err := f.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGroupGo measures b.N tasks given to one group, then its Wait:
// ns/op is the group's throughput per task.
func BenchmarkGroupGo(b *testing.B) {
	for _, n := range []int{1, 4, 64} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			p := workerpool.New(n)
			defer p.StopWait()
			fn := func(context.Context) error { return nil }
			b.ResetTimer()
			g := p.Group(context.Background())
			for range b.N {
				g.Go(fn)
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkMap measures Map over 1000 items; ns/op and allocs/op are per
// call, so divide by 1000 for an item.
func BenchmarkMap(b *testing.B) {
	for _, n := range []int{1, 4, 64} {
		b.Run(fmt.Sprintf("items=1000/workers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			p := workerpool.New(n)
			defer p.StopWait()
			items := make([]int, 1000)
			fn := func(_ context.Context, v int) (int, error) { return v + 1, nil }
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if _, err := workerpool.Map(ctx, p, items, fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTurns measures the cost of taking turns: N sub-pools of limit 4
// on a pool of 4 workers, each with tasks waiting. b.N empty tasks are
// submitted round robin to a paused pool, untimed; the timer runs from the
// pause's end until StopWait has run them all. Turns scale when the time
// per task does not grow with N: compare queues=10 and queues=10000 with
// queues=1.
func BenchmarkTurns(b *testing.B) {
	for _, n := range []int{1, 10, 100, 10_000} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			p := workerpool.New(4)
			subs := make([]*workerpool.Subpool, n)
			for i := range subs {
				subs[i] = p.Subpool(fmt.Sprint("q", i), 4)
			}
			ctx, resume := context.WithCancel(context.Background())
			p.Pause(ctx)
			var ran atomic.Int64
			task := func() { ran.Add(1) }
			for i := 0; i < b.N; i++ {
				if err := subs[i%n].Submit(task); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			reportCPU(b)
			resume()
			p.StopWait()
			b.StopTimer()
			if got := ran.Load(); got != int64(b.N) {
				b.Fatalf("ran %d tasks, want %d", got, b.N)
			}
		})
	}
}
