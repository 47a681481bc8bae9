package main

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	ours "github.com/dispatchkit/workerpool"
)

// BenchmarkIdentity measures what it would cost a wait on the pool to ask
// "am I one of the pool's workers?", as a wait that lends its place must,
// against a SubmitWait from outside the pool, the wait that must not pay
// for it. Go gives a goroutine no identity of its own: the two ways a
// library has are to read the goroutine's number from the first line of
// runtime.Stack, or to walk its frames with runtime.Callers down to the
// function that started it, comparing program counters. Both grow with the caller's stack, whose depth
// is the user's: depth is how many frames the caller adds.
func BenchmarkIdentity(b *testing.B) {
	for _, depth := range []int{1, 16, 64} {
		b.Run("Stack/depth="+strconv.Itoa(depth), func(b *testing.B) {
			b.ReportAllocs()
			atDepth(depth, func() {
				var buf [64]byte
				for range b.N {
					n := runtime.Stack(buf[:], false)
					if !strings.HasPrefix(string(buf[:n]), "goroutine ") {
						b.Fatal("no goroutine line")
					}
				}
			})
		})
		b.Run("Callers/depth="+strconv.Itoa(depth), func(b *testing.B) {
			// The cheapest walk: the frames' program counters only, each
			// compared with the one the goroutine's starting function
			// returns to, learned once; no symbols.
			b.ReportAllocs()
			atDepth(depth, func() {
				var pcs [128]uintptr
				bottom := pcs[:runtime.Callers(0, pcs[:])]
				mark := bottom[len(bottom)-1]
				for range b.N {
					n := runtime.Callers(0, pcs[:])
					found := false
					for _, pc := range pcs[:n] {
						found = found || pc == mark
					}
					if !found {
						b.Fatal("the goroutine's first frame is not on the stack")
					}
				}
			})
		})
	}
	b.Run("SubmitWait", func(b *testing.B) {
		// The wait the check would be added to, from 100 goroutines
		// outside the pool, as the harness's "wait" workload.
		p := ours.New(8)
		defer p.StopWait()
		b.ReportAllocs()
		var wg sync.WaitGroup
		per := b.N/100 + 1
		b.ResetTimer()
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					if err := p.SubmitWait(func() {}); err != nil {
						panic(err)
					}
				}
			}()
		}
		wg.Wait()
	})
}

// atDepth calls f under depth more frames.
//
//go:noinline
func atDepth(depth int, f func()) {
	if depth <= 1 {
		f()
		return
	}
	atDepth(depth-1, f)
}
