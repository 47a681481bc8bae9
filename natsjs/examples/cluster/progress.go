package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A tally counts the results the workers recorded.
type tally struct {
	mu          sync.Mutex
	seen        map[string]bool // jobs with a result
	handled     map[int]int     // results by worker
	redelivered map[int]int     // results by worker of a delivery after the first
	results     int
}

// counts is a snapshot of a tally.
type counts struct {
	distinct, results, redelivered int
	handled, redeliveredBy         map[int]int
}

func (t *tally) add(msg jetstream.Msg) {
	worker, _ := strconv.Atoi(msg.Headers().Get("Worker"))
	delivery, _ := strconv.Atoi(msg.Headers().Get("Delivery"))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen[string(msg.Data())] = true
	t.handled[worker]++
	if delivery > 1 {
		t.redelivered[worker]++
	}
	t.results++
}

func (t *tally) snapshot() counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := counts{distinct: len(t.seen), results: t.results, handled: map[int]int{}, redeliveredBy: map[int]int{}}
	for w, n := range t.handled {
		c.handled[w] = n
	}
	for w, n := range t.redelivered {
		c.redeliveredBy[w] = n
		c.redelivered += n
	}
	return c
}

// watchResults counts, in the background, every result in the results
// stream, until ctx is done.
func watchResults(ctx context.Context, js jetstream.JetStream) (*tally, error) {
	t := &tally{seen: map[string]bool{}, handled: map[int]int{}, redelivered: map[int]int{}}
	oc, err := js.OrderedConsumer(ctx, resultsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	cc, err := oc.Consume(t.add)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, cc.Stop)
	return t, nil
}

// supervise shows the progress, kills a worker once a third of the jobs
// are done (if kill), and returns once every job has a result and the jobs
// stream is empty.
func supervise(ctx context.Context, js jetstream.JetStream, t *tally, procs []*proc, jobs int, kill bool) error {
	start := time.Now()
	tty := isTerminal()
	victim := procs[len(procs)/2]
	lastProgress, lastDistinct := time.Now(), -1
	lastPrint := time.Time{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	drawn := 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		c := t.snapshot()
		if kill && !victim.killed && c.distinct >= jobs/3 {
			victim.killed = true
			victim.kill()
		}
		for _, p := range procs {
			select {
			case <-p.exited:
				if !p.killed {
					return fmt.Errorf("worker %d exited: %v", p.id, p.err)
				}
			default:
			}
		}
		done := c.distinct == jobs && streamEmpty(ctx, js)
		if tty || done || time.Since(lastPrint) >= time.Second {
			lines := render(c, procs, jobs, time.Since(start), tty)
			if tty && drawn > 0 {
				fmt.Printf("\033[%dA", drawn) // back to the top of the block
			}
			fmt.Print(strings.Join(lines, "\n") + "\n")
			drawn, lastPrint = len(lines), time.Now()
		}
		if done {
			return nil
		}
		if c.distinct != lastDistinct {
			lastDistinct, lastProgress = c.distinct, time.Now()
		} else if time.Since(lastProgress) > 30*time.Second {
			return errors.New("no progress for 30s")
		}
	}
}

// render returns the progress block: one line overall, one per process,
// each ending, on a terminal, by clearing the rest of the line.
func render(c counts, procs []*proc, jobs int, elapsed time.Duration, tty bool) []string {
	const width = 30
	eol := ""
	if tty {
		eol = "\033[K"
	}
	filled := width * c.distinct / jobs
	lines := []string{fmt.Sprintf("%6.1fs  handled %5d/%d [%s%s] %3d%%%s",
		elapsed.Seconds(), c.distinct, jobs, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		100*c.distinct/jobs, eol)}
	for _, p := range procs {
		state := "running"
		if p.killed {
			state = "KILLED"
		} else {
			select {
			case <-p.exited:
				state = "exited"
			default:
			}
		}
		lines = append(lines, fmt.Sprintf("  worker %d  pid %-7d %-8s handled %5d  redelivered %3d%s",
			p.id, p.cmd.Process.Pid, state, c.handled[p.id], c.redeliveredBy[p.id], eol))
	}
	return lines
}

// summary prints the run's figures. lost is counted from the results.
func summary(t *tally, jobs int) {
	c := t.snapshot()
	fmt.Printf("\nsummary: jobs %d, handled %d, handled twice %d, redelivered %d, lost %d\n",
		jobs, c.distinct, c.results-c.distinct, c.redelivered, jobs-c.distinct)
}

// streamEmpty reports whether the jobs stream holds no message.
func streamEmpty(ctx context.Context, js jetstream.JetStream) bool {
	s, err := js.Stream(ctx, jobsStream)
	if err != nil {
		return false
	}
	info, err := s.Info(ctx)
	return err == nil && info.State.Msgs == 0
}

// isTerminal reports whether standard output is a terminal, where the
// progress block is redrawn in place.
func isTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
