// Batch prices a batch of order lines on a pool and reports every line:
// its amount, or why it failed. With workerpool.MapSeq a bad line costs
// only its own result: each line yields its amount or its error, in the
// order of the lines, as soon as it and the lines before it are done.
// (workerpool.Map, by contrast, stops at the first error.)
//
//	go run ./examples/batch
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dispatchkit/workerpool"
)

func main() {
	// A real batch tool would exit with a non-zero status when a line
	// failed; this one ends normally, so that go run shows only its report.
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// lines is the batch: quantity x unit price.
var lines = []string{
	"3 x 4.50",
	"1 x 12.00",
	"two x 3.00",
	"5 x 0.99",
	"",
	"2 x 7.25",
}

// run prices the lines on 3 workers, prints one line of report per order
// line and a total, and returns how many lines failed.
func run(ctx context.Context, out io.Writer) (int, error) {
	p := workerpool.New(3)
	defer p.StopWait()

	w := &errWriter{w: out}
	total, failed := 0.0, 0
	i := 0
	for amount, err := range workerpool.MapSeq(ctx, p, lines, price) {
		if err != nil {
			failed++
			w.printf("line %d: error: %v\n", i+1, err)
		} else {
			total += amount
			w.printf("line %d: %6.2f\n", i+1, amount)
		}
		i++
	}
	w.printf("total %.2f; %d of %d lines failed\n", total, failed, len(lines))
	return failed, w.err
}

// price parses one order line and returns its amount. It takes a moment,
// longer for longer lines, so the lines end out of order; MapSeq yields
// them in order all the same.
func price(ctx context.Context, line string) (float64, error) {
	select {
	case <-time.After(time.Duration(len(line)) * time.Millisecond):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var qty int
	var unit float64
	if _, err := fmt.Sscanf(line, "%d x %f", &qty, &unit); err != nil {
		return 0, fmt.Errorf("%q: %w", line, err)
	}
	return float64(qty) * unit, nil
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
