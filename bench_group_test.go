package workerpool_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dispatchkit/workerpool"
)

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
