// Command tenants shows fair turns between sub-pools: one tenant floods a
// workerpool.Pool with thousands of short tasks while two others submit a
// steady trickle, and their tasks keep flowing.
//
//	go run ./examples/tenants
//	go run ./examples/tenants -svg docs/tenants.svg
//	go run ./examples/tenants -workers 4 -bulk 2000 -duration 4s
//
// It runs the same load twice, back to back, each time on a new pool of
// -workers workers:
//
//   - shared queue: every tenant submits to the pool itself, so all tasks
//     wait in one FIFO queue, as they would in a pool with a single shared
//     queue. A task submitted behind the flood waits for all of it.
//   - fair turns: each tenant submits to its own [workerpool.Subpool], and
//     when a worker comes free the sub-pools with waiting tasks take turns.
//
// A live view shows a line per tenant: its sub-pool's limit, tasks running
// and waiting, tasks done, the median and 99th percentile of the wait
// (submission to start) of its tasks started so far, and how long its
// oldest waiting task has waited. At the end a table compares each tenant's
// wait in the two runs. With -svg FILE it also writes a timeline chart of
// the pool's workers and each tenant's running and waiting tasks, sampled
// from Status every 20 ms.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the program: it parses args, runs both phases, prints the live
// view and the summary to stdout, and writes the chart if -svg says so. It
// returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := defaultConfig()
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "the pool's maximum number of workers")
	fs.IntVar(&cfg.bulk, "bulk", cfg.bulk, "tasks the bulk tenant floods the pool with, all at once")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "how long the interactive and reports tenants submit, in each phase")
	fs.DurationVar(&cfg.work, "work", cfg.work, "how long a bulk or interactive task sleeps; a report sleeps four times as long")
	svgFile := fs.String("svg", "", "write a timeline chart of both phases to this SVG file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.workers < 1:
		err = fmt.Errorf("-workers %d: must be at least 1", cfg.workers)
	case cfg.bulk < 0:
		err = fmt.Errorf("-bulk %d: must not be negative", cfg.bulk)
	case cfg.duration <= 0:
		err = fmt.Errorf("-duration %v: must be positive", cfg.duration)
	case cfg.work < 0:
		err = fmt.Errorf("-work %v: must not be negative", cfg.work)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tenants: %v (see -h)\n", err)
		return 2
	}
	fi, err := os.Stdout.Stat()
	cfg.tty = stdout == io.Writer(os.Stdout) && err == nil && fi.Mode()&os.ModeCharDevice != 0
	if !cfg.tty {
		cfg.draw = 500 * time.Millisecond // fewer lines in a log
	}

	res := demo(cfg, stdout)
	summary(stdout, cfg, res)
	if *svgFile != "" {
		if err := os.WriteFile(*svgFile, chart(cfg, res), 0o644); err != nil {
			fmt.Fprintf(stderr, "tenants: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nchart written to %s\n", *svgFile)
	}
	for _, ph := range res {
		if ph.errs > 0 {
			fmt.Fprintf(stderr, "tenants: %s: %d submissions failed\n", ph.title, ph.errs)
			return 1
		}
	}
	return 0
}

// A config sizes the load and says how to show it.
type config struct {
	workers  int           // the pool's maximum
	bulk     int           // tasks in the flood
	duration time.Duration // how long the trickles last, per phase
	work     time.Duration // a bulk or interactive task's sleep
	sample   time.Duration // how often the monitor reads Status
	draw     time.Duration // how often the live view is redrawn (plain: printed)
	tty      bool          // redraw the live view in place with ANSI codes
}

// defaultConfig returns the defaults: a run of about five seconds on one
// core. The flood is 4000 tasks of 3 ms on 8 workers, 1.5 s of work, which
// comes 0.3 s into a 2.5 s trickle, so each phase shows the trickle alone,
// then under the flood, then alone again.
func defaultConfig() config {
	return config{
		workers:  8,
		bulk:     4000,
		duration: 2500 * time.Millisecond,
		work:     3 * time.Millisecond,
		sample:   20 * time.Millisecond,
		draw:     250 * time.Millisecond,
	}
}

// A tenant is one source of load, with its own sub-pool in the fair-turns
// phase: either a flood of tasks submitted all at once, or a trickle of one
// task every so often.
type tenant struct {
	name  string
	limit int           // its sub-pool's limit
	every time.Duration // a trickle: one task this often; 0 for a flood
	flood int           // a flood: this many tasks at once, at time at
	at    time.Duration // when the flood comes, from the phase's start
	work  time.Duration // how long each task sleeps
}

// tenants returns the load of cfg. The bulk tenant may use every worker:
// fair turns, not a reserved share, are what keep the others flowing. The
// interactive tenant's limit leaves it room to catch up should its tasks
// run slow, on a machine busy with other work.
func tenants(cfg config) []tenant {
	return []tenant{
		{name: "bulk", limit: cfg.workers, flood: cfg.bulk, at: cfg.duration / 8, work: cfg.work},
		{name: "interactive", limit: max(1, cfg.workers/2), every: 5 * time.Millisecond, work: cfg.work},
		{name: "reports", limit: 2, every: 100 * time.Millisecond, work: 4 * cfg.work},
	}
}

// describe returns a tenant's load in words, for the summary and the chart.
func (t tenant) describe() string {
	if t.every == 0 {
		return fmt.Sprintf("%d tasks of %v at once, at %v", t.flood, t.work, t.at)
	}
	return fmt.Sprintf("a task of %v every %v", t.work, t.every)
}
