// Command demo runs a workerpool.Pool under a bursty, I/O-like load and shows
// it at work: workers rise to -max in a burst, requests queue (and, with a
// bounded queue, are rejected), the queue drains, and in the lulls idle
// workers are reaped back down to -min. The summary tells how long
// requests waited in the queue and how long they ran (-timings=false turns
// the pool's timings off).
//
//	go run ./examples/demo
//	go run ./examples/demo -max 8 -queue 0 -overflow block -duration 20s
//
// Ctrl-C shuts the pool down early: queued requests get -grace to run, the
// rest are abandoned and counted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatchkit/workerpool"
)

// A phase is one stretch of the load schedule: for length, requests arrive
// at rate per second.
type phase struct {
	name   string
	length time.Duration
	rate   float64
	lull   bool // workers fall to -min before it ends
}

// meanRequest is about how long a request takes (see request), and
// longestRequest the most.
const (
	meanRequest    = 75 * time.Millisecond
	longestRequest = 800 * time.Millisecond
)

// plan returns the load schedule. Bursts of 700 requests a second take
// fractions of total: 32 workers serve about 430 a second, so they overload
// the pool and fill its queue. Each lull lasts as long as reaping needs:
// the backlog's drain (what the longer burst left queued, at most queue if
// the queue is bounded, at the pool's pace, then the longest request), then
// the one to two idle timeouts a worker waits before it exits, then half a
// timeout of margin for a busy machine, then a tenth of total at -min, to
// be seen. In the first lull a trickle of requests
// arrives, too few to keep more than min workers: each one keeps at most
// the worker it goes to, for up to two timeouts. With idle < 0 workers are
// never reaped, and the lulls take fractions of total too.
func plan(total, idle time.Duration, maxWorkers, minWorkers, queue int) []phase {
	const burstRate = 700
	burst := scale(total, 0.17)
	lull := scale(total, 0.3)
	trickle := 5.0
	if idle > 0 {
		pace := float64(maxWorkers) / meanRequest.Seconds() // requests served a second
		backlog := max(0, burst.Seconds()*(burstRate-pace))
		if queue > 0 {
			backlog = min(backlog, float64(queue))
		}
		drain := time.Duration(backlog/pace*float64(time.Second)) + longestRequest
		lull = (drain + 2*idle + idle/2 + scale(total, 0.1)).Round(time.Millisecond)
		trickle = float64(minWorkers) / (3 * idle.Seconds())
	}
	return []phase{
		{name: "warm-up", length: scale(total, 0.08), rate: 20},
		{name: "burst", length: burst, rate: burstRate},
		{name: "lull", length: lull, rate: trickle, lull: idle > 0},
		{name: "burst 2", length: scale(total, 0.12), rate: burstRate},
		{name: "quiet", length: lull, rate: 0, lull: idle > 0},
	}
}

// overflows maps the -overflow names to the policies.
var overflows = map[string]workerpool.Overflow{
	"block": workerpool.Block, "reject": workerpool.Reject, "caller-runs": workerpool.CallerRuns,
}

func main() { os.Exit(run()) }

func run() int {
	maxWorkers := flag.Int("max", 32, "maximum number of workers")
	minWorkers := flag.Int("min", 2, "workers kept through idle periods, 0..max")
	idle := flag.Duration("idle", 0, "how long a worker above -min may idle before it exits; 0 means -duration/10, negative never reaps")
	queue := flag.Int("queue", 256, "bound on the waiting queue; 0 means unbounded")
	overflowName := flag.String("overflow", "reject", "what a submission to a full queue does: block, reject or caller-runs")
	duration := flag.Duration("duration", 10*time.Second, "scale of the load schedule: the bursts take fractions of it; each lull lasts as long as reaping down to -min needs, plus a tenth of it")
	grace := flag.Duration("grace", 500*time.Millisecond, "on Ctrl-C, how long queued requests may still run before they are abandoned")
	seed := flag.Uint64("seed", 1, "seed for the random request durations")
	timings := flag.Bool("timings", true, "time the requests' waits and runs, for the summary")
	flag.Parse()

	// Check what New would panic on, and what makes no sense for the demo,
	// so that a bad flag gets a clear message rather than a stack trace.
	overflow, ok := overflows[*overflowName]
	var err error
	switch {
	case !ok:
		err = fmt.Errorf("-overflow %q: must be block, reject or caller-runs", *overflowName)
	case flag.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", flag.Arg(0))
	case *maxWorkers < 1:
		err = fmt.Errorf("-max %d: must be at least 1", *maxWorkers)
	case *minWorkers < 0 || *minWorkers > *maxWorkers:
		err = fmt.Errorf("-min %d: must be between 0 and -max (%d)", *minWorkers, *maxWorkers)
	case *queue < 0:
		err = fmt.Errorf("-queue %d: must not be negative", *queue)
	case *duration <= 0:
		err = fmt.Errorf("-duration %v: must be positive", *duration)
	case *grace < 0:
		err = fmt.Errorf("-grace %v: must not be negative", *grace)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v (see -h)\n", err)
		return 2
	}
	if *idle == 0 {
		*idle = *duration / 10
	}

	opts := []workerpool.Option{
		workerpool.WithMinWorkers(*minWorkers),
		workerpool.WithIdleTimeout(*idle),
		workerpool.WithMaxWaiting(*queue),
		workerpool.WithOverflow(overflow),
		// The default handler logs each panic with its stack, which would
		// garble the live status line; Status().Panicked still counts them.
		workerpool.WithPanicHandler(func(*workerpool.PanicError) {}),
	}
	if *timings {
		opts = append(opts, workerpool.WithTaskTimings())
	}
	p := workerpool.New(*maxWorkers, opts...)

	bound := "unbounded"
	if *queue > 0 {
		bound = fmt.Sprintf("%d, then %v", *queue, overflow)
	}
	fmt.Printf("pool: max %d, min %d, idle timeout %v, queue %s\n", *maxWorkers, *minWorkers, *idle, bound)
	schedule := plan(*duration, *idle, *maxWorkers, *minWorkers, *queue)
	sep := "load: "
	for _, ph := range schedule {
		fmt.Printf("%s%s %v", sep, ph.name, ph.length)
		sep = ", "
	}
	fmt.Print("\n\n")

	// Ctrl-C or SIGTERM cancels ctx, which ends the load early.
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	start := time.Now()
	var current atomic.Value // name of the current phase, for the monitor
	current.Store(schedule[0].name)
	stopMonitor := make(chan struct{})
	var monitors sync.WaitGroup
	fi, err := os.Stdout.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0 // redraw in place only on a terminal
	monitors.Go(func() { monitor(p, start, &current, tty, stopMonitor) })

	offered := generate(ctx, p, schedule, start, rand.New(rand.NewPCG(*seed, *seed)), &current, nil)
	interrupted := ctx.Err() != nil
	stopSignals() // from here on a second Ctrl-C kills the program at once

	// Stop accepting requests and let the queued ones run, up to a deadline
	// after which Shutdown abandons the rest and hands them back. After a
	// normal run the queue is long empty; after Ctrl-C it may be full.
	deadline := 5 * time.Second
	current.Store("stop")
	if interrupted {
		deadline = *grace
		current.Store("ctrl-c")
	}
	sctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	dropped, err := p.Shutdown(sctx)
	wall := time.Since(start)
	close(stopMonitor)
	monitors.Wait()

	why, outcome := "load schedule done", "every accepted request ran"
	if interrupted {
		why = "interrupted"
	}
	if err != nil {
		outcome = fmt.Sprintf("%v deadline passed, %d queued requests abandoned", deadline, len(dropped))
	}
	s := p.Status()
	fmt.Printf("\n%s; shutdown: %s\n", why, outcome)
	fmt.Printf("  wall time    %v\n", wall.Round(time.Millisecond))
	fmt.Printf("  offered      %6d requests, of which\n", offered)
	fmt.Printf("  submitted    %6d accepted by the pool\n", s.Submitted)
	fmt.Printf("  rejected     %6d queue full\n", s.Rejected)
	fmt.Printf("  completed    %6d (%.0f/s), of which %d panicked\n", s.Completed, float64(s.Completed)/wall.Seconds(), s.Panicked)
	fmt.Printf("  abandoned    %6d (Shutdown returned %d tasks)\n", s.Abandoned, len(dropped))
	fmt.Printf("  peak workers %6d of %d, peak waiting %d\n", s.PeakWorkers, s.MaxWorkers, s.PeakWaiting)
	if *timings {
		fmt.Printf("  waited       %s\n", summarize(s.Wait))
		fmt.Printf("  ran          %s\n", summarize(s.Run))
	}
	return 0
}

// summarize describes a Timing: the mean, the range of its bucket that
// holds the 99th percentile, and the longest.
func summarize(t workerpool.Timing) string {
	if t.Count == 0 {
		return "no request ended"
	}
	return fmt.Sprintf("mean %v, p99 %s, max %v", short(t.Total/time.Duration(t.Count)), p99(t), short(t.Max))
}

// p99 returns the range of the 99th percentile, as "100ms..250ms": the
// bounds of its bucket, the upper one no more than the longest.
func p99(t workerpool.Timing) string {
	want := (t.Count*99 + 99) / 100 // the rank of the 99th percentile, rounded up
	var n uint64
	var lower time.Duration
	for i, upper := range workerpool.TimingBounds {
		if n += t.Buckets[i]; n >= want {
			return fmt.Sprintf("%v..%v", lower, short(min(upper, t.Max)))
		}
		lower = upper
	}
	return fmt.Sprintf("%v..%v", lower, short(t.Max))
}

// short rounds d to three significant digits.
func short(d time.Duration) time.Duration {
	for r := time.Second; r > time.Nanosecond; r /= 10 {
		if d >= 100*r {
			return d.Round(r)
		}
	}
	return d
}

// generate submits requests as schedule says until it ends or ctx is done,
// and returns how many it offered. Each 10 ms tick it submits the requests
// that arrived in that tick. ended, if not nil, is called as each phase
// ends, before the next begins.
//
// It submits with SubmitContext, so the -overflow policy decides what a full
// queue does. With reject (the default) the request is refused at once and
// the load keeps its schedule, as a server sheds load it cannot queue: that
// shows the pool best. With block the generator waits for room, and with
// caller-runs it runs the request itself; either way arrivals slow to what
// the pool can take (the ticker drops the ticks the generator misses). The
// ctx lets Ctrl-C free a generator that is waiting for room.
func generate(ctx context.Context, p *workerpool.Pool, schedule []phase, start time.Time, rng *rand.Rand, current *atomic.Value, ended func(phase)) (offered int) {
	const tick = 10 * time.Millisecond
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	i, end := 0, schedule[0].length
	due := 0.0 // arrivals owed, carried across ticks so low rates work
	for {
		select {
		case <-ctx.Done():
			return offered
		case <-ticker.C:
		}
		for time.Since(start) >= end {
			if ended != nil {
				ended(schedule[i])
			}
			if i++; i == len(schedule) {
				return offered
			}
			end += schedule[i].length
			current.Store(schedule[i].name)
		}
		for due += schedule[i].rate * tick.Seconds(); due >= 1; due-- {
			offered++
			err := p.SubmitContext(ctx, request(rng))
			if err != nil && !errors.Is(err, workerpool.ErrQueueFull) {
				return offered // ctx done, or the pool stopped
			}
		}
	}
}

// request returns a simulated I/O-bound request: nine in ten are fast
// (5-50 ms), the rest slow (200-800 ms), and one in 500 hits a bug and
// panics, which the pool survives.
func request(rng *rand.Rand) func() {
	d := between(rng, 5*time.Millisecond, 50*time.Millisecond)
	if rng.IntN(10) == 0 {
		d = between(rng, 200*time.Millisecond, 800*time.Millisecond)
	}
	if rng.IntN(500) == 0 {
		return func() { time.Sleep(d); panic("simulated bug") }
	}
	return func() { time.Sleep(d) }
}

// monitor shows the pool's status until stop is closed, then once more. On a
// terminal it redraws one line in place every 100 ms and keeps the last line
// of each phase on screen; otherwise it prints a plain line every 500 ms and
// at each phase change.
func monitor(p *workerpool.Pool, start time.Time, current *atomic.Value, tty bool, stop <-chan struct{}) {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	var last string
	var printed time.Time
	for final := false; !final; {
		select {
		case <-stop:
			final = true
		case <-ticker.C:
		}
		name := current.Load().(string)
		s := p.Status()
		// Under 80 columns, so that a redraw never wraps; "done" = completed.
		line := fmt.Sprintf("%4.1fs %-7s workers %2d busy %2d idle %2d  waiting %3d  done %4d  rejected %3d",
			time.Since(start).Seconds(), name, s.Workers, s.Busy, s.Idle, s.Waiting, s.Completed, s.Rejected)
		switch {
		case tty:
			if last != "" && name != last {
				fmt.Println() // keep the previous phase's last line
			}
			fmt.Print("\r\033[K" + line) // return to column 0, erase the line
			if final {
				fmt.Println()
			}
		case final || name != last || time.Since(printed) >= 500*time.Millisecond:
			fmt.Println(line)
			printed = time.Now()
		}
		last = name
	}
}

func scale(d time.Duration, frac float64) time.Duration {
	return time.Duration(float64(d) * frac).Round(time.Millisecond)
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}
