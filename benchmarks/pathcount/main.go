// Command pathcount runs one operation on a warm pool, for .ci/pathcount,
// which builds it with coverage of the workerpool package: it clears the
// coverage counters once the pool is warm, runs the operation once, and
// writes the counters, so that they name the package's functions that the
// operation ran. The operations: a plain Submit (submit), a keyed task of
// a sub-pool (keyed), and a Call that gives up while its task waits
// (callgiveup).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/coverage"
	"time"

	"github.com/dispatchkit/workerpool"
)

func main() {
	op := flag.String("op", "submit", "submit, keyed or callgiveup")
	dir := flag.String("dir", "", "where to write the coverage counters")
	flag.Parse()
	p := workerpool.New(4)
	s := p.Subpool("s", 2)
	for range 1000 { // warm: the workers started, each path taken before
		must(p.SubmitWait(func() {}))
		must(s.SubmitKey("k", func() {}))
	}
	var operation func()
	switch *op {
	case "submit":
		operation = func() {
			done := make(chan struct{})
			must(p.Submit(func() { close(done) }))
			<-done
		}
	case "keyed":
		operation = func() {
			done := make(chan struct{})
			must(s.SubmitKey("k", func() { close(done) }))
			<-done
		}
	case "callgiveup":
		release := make(chan struct{}) // every worker busy: the Call's task waits
		defer close(release)
		for range 4 {
			must(p.Submit(func() { <-release }))
		}
		operation = func() {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			if _, err := workerpool.Call(ctx, p, func(context.Context) (int, error) { return 1, nil }); err == nil {
				fail("the Call ran; it was to give up")
			}
		}
	default:
		fail("unknown -op " + *op)
	}
	time.Sleep(50 * time.Millisecond) // the workers park
	must(coverage.ClearCounters())
	operation()
	time.Sleep(50 * time.Millisecond) // the worker parks and reports
	must(coverage.WriteCountersDir(*dir))
	must(coverage.WriteMetaDir(*dir))
}

func must(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "pathcount:", msg)
	os.Exit(1)
}
