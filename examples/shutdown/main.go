// Shutdown is a service that stops cleanly on Ctrl-C: it stops taking
// jobs, gives the queued ones a grace period to run, then drops the rest
// and says what became of them.
//
//	go run ./examples/shutdown
//
// Press Ctrl-C while it serves; it stops by itself after 3 seconds.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatchkit/workerpool"
)

func main() {
	if err := serve(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// serve runs the service until Ctrl-C (SIGINT), SIGTERM or 3 seconds.
func serve(out io.Writer) error {
	// The signal cancels ctx instead of killing the program.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Once it has, a second Ctrl-C kills the program at once, as usual:
	// the way out if the shutdown itself hangs.
	context.AfterFunc(ctx, stop)

	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := fmt.Fprintln(out, "serving; press Ctrl-C to stop"); err != nil {
		return err
	}
	return run(ctx, out, time.Second)
}

// run takes a job every 10 ms until ctx is done, as a server takes
// requests, on 2 workers whose jobs take 200 ms each, so that a queue
// builds up. Then it shuts the pool down, giving the queued jobs grace to
// run, and reports what became of the others.
func run(ctx context.Context, out io.Writer, grace time.Duration) error {
	p := workerpool.New(2)
	var ran atomic.Int64
	job := func() {
		time.Sleep(200 * time.Millisecond)
		ran.Add(1)
	}

	taken := 0
	var futures []*workerpool.Future[struct{}]
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue
		case <-tick.C:
		}
		taken++
		if taken%2 == 1 {
			// Fire and forget: if Shutdown drops it, Shutdown hands it
			// back.
			if err := p.Submit(job); err != nil {
				return err
			}
		} else {
			// A job someone waits for (Go, Call, SubmitWait, a Group,
			// Map): if Shutdown drops it, its waiter gets ErrStopped.
			futures = append(futures, workerpool.Go(p, func() (struct{}, error) {
				job()
				return struct{}{}, nil
			}))
		}
	}
	w := &errWriter{w: out}
	w.printf("stopping: %d jobs taken, %d ran; the queued ones get %v\n", taken, ran.Load(), grace)

	// Not Shutdown(ctx): ctx is done already, and Shutdown would drop
	// every queued job at once. The grace period is a fresh deadline.
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	dropped, err := p.Shutdown(sctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	w.printf("Shutdown returned %d funcs and %v\n", len(dropped), err)

	told := 0
	for _, f := range futures {
		if _, err := f.Wait(); errors.Is(err, workerpool.ErrStopped) {
			told++
		}
	}
	w.printf("%d jobs ran, %d were dropped (Status().Abandoned):\n", ran.Load(), p.Status().Abandoned)
	w.printf("  %d fire-and-forget jobs came back from Shutdown\n", len(dropped))
	w.printf("  %d waited-for jobs went to their waiters as ErrStopped\n", told)
	// The funcs that came back are opaque: run them now, elsewhere, or
	// keep your own record of each job (an id, a row) to retry it later.
	return w.err
}

// An errWriter prints to w until a write fails, and keeps that error, so
// that run checks it once rather than after every line.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
