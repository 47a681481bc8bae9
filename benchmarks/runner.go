package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is what the parent process runs.
type config struct {
	quick     bool
	reps      int
	peers     []peer
	workloads []workload
	out, svg  string
	timeout   time.Duration
	// A measurement during which other processes used more than
	// maxOther of the machine's CPU is run again, up to retries times,
	// and the least disturbed try is kept.
	maxOther float64
	retries  int
	// quietWait is what is left of the time the run may spend waiting for
	// a quiet machine before retries.
	quietWait time.Duration
}

// choose sets the peers and workloads from comma-separated lists of names;
// an empty list means all.
func (c *config) choose(poolList, workList string) error {
	c.peers, c.workloads = peers, workloads
	if poolList != "" {
		c.peers = nil
		for _, name := range strings.Split(poolList, ",") {
			p, err := findPeer(name)
			if err != nil {
				return err
			}
			c.peers = append(c.peers, p)
		}
	}
	if workList != "" {
		c.workloads = nil
		for _, key := range strings.Split(workList, ",") {
			w, err := findWorkload(key)
			if err != nil {
				return err
			}
			c.workloads = append(c.workloads, w)
		}
	}
	if c.reps < 1 {
		return fmt.Errorf("-reps must be at least 1")
	}
	return nil
}

// run calibrates the tasks, runs every measurement in a child process, and
// writes the report and the chart.
func run(cfg config, command string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	calibrate()
	env := describeEnv(command, cfg)
	env.tinyNs = serialTime(tinyTask, 1_000_000)
	env.cpuNs = serialTime(cpuTask, 1_000)
	fmt.Fprintf(os.Stderr, "calibrated: tiny task %v (%d rounds), cpu task %v (%d rounds)\n",
		env.tinyNs, tinyIters, env.cpuNs, cpuIters)

	started, meter := time.Now(), startCPUMeter()
	runs := make(map[string][]result) // by cellKey
	for rep := range cfg.reps {
		for wi, w := range cfg.workloads {
			for _, p := range rotate(cfg.peers, rep+wi) {
				r, err := measure(self, &cfg, p, w)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "rep %d/%d  %-9s %-10s %10.0f ns/task\n",
					rep+1, cfg.reps, w.key, p.name, float64(r.WallNs)/float64(r.Tasks))
				k := cellKey(w.key, p.name)
				runs[k] = append(runs[k], r)
			}
		}
	}
	env.elapsed = time.Since(started)
	env.otherCPU = -1
	if share, ok := meter.otherShare(env.cores); ok {
		env.otherCPU = share
	}

	t := summarize(cfg, runs)
	md := report(env, t, relLink(cfg.out, cfg.svg))
	fmt.Print(md)
	// What paired runs found, written by hand, follows the run's report:
	// go run . keeps it.
	if pairs, err := os.ReadFile(pairsFile); err == nil {
		md += "\n" + string(pairs)
	}
	if err := writeFile(cfg.out, md); err != nil {
		return err
	}
	if err := writeFile(cfg.svg, chart(env, t)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s and %s in %v\n", cfg.out, cfg.svg, env.elapsed.Round(time.Second))
	if env.otherCPU > 0.05 {
		fmt.Fprintf(os.Stderr, "warning: other processes used %.0f%% of the CPU during the run; the numbers are noisy\n", 100*env.otherCPU)
	}
	return nil
}

// pairsFile holds the paired runs of one revision against another, which
// RESULTS.md quotes after the peer comparison.
const pairsFile = "PAIRS.md"

// writeFile writes data to name, creating its directory if need be.
func writeFile(name, data string) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.WriteFile(name, []byte(data), 0o644)
}

// rotate returns ps rotated left by n, so that no pool always runs first.
func rotate(ps []peer, n int) []peer {
	n %= len(ps)
	return append(slices.Clone(ps[n:]), ps[:n]...)
}

func cellKey(workload, pool string) string { return workload + "/" + pool }

// measure runs pool p on workload w, again if other processes disturbed
// the run (see config.maxOther), and returns the least disturbed result.
// Before running it again it waits, up to a minute, for the machine to be
// quiet, within cfg.quietWait.
func measure(self string, cfg *config, p peer, w workload) (result, error) {
	var best result
	tries := 0
	for tries <= cfg.retries {
		r, err := runOne(self, cfg, p, w)
		if err != nil {
			return result{}, err
		}
		if tries++; tries == 1 || r.OtherCPU < best.OtherCPU {
			best = r
		}
		if r.OtherCPU <= cfg.maxOther {
			break
		}
		fmt.Fprintf(os.Stderr, "  %s on %s: other processes took %.0f%% of the CPU\n", p.name, w.key, 100*r.OtherCPU)
		if tries <= cfg.retries && cfg.quietWait > 0 {
			start := time.Now()
			if !waitQuiet(cfg.maxOther, runtime.NumCPU(), min(time.Minute, cfg.quietWait)) {
				fmt.Fprintf(os.Stderr, "  the machine stayed busy\n")
			}
			cfg.quietWait -= time.Since(start)
		}
	}
	best.Retries = tries - 1
	return best, nil
}

// runOne runs pool p on workload w in a child process and returns its
// result. A child that fails, for a miscount or anything else, fails the
// whole run.
func runOne(self string, cfg *config, p peer, w workload) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	args := []string{"-child", "-pool", p.name, "-workload", w.key,
		"-tiny-iters", strconv.Itoa(tinyIters), "-cpu-iters", strconv.Itoa(cpuIters)}
	if cfg.quick {
		args = append(args, "-quick")
	}
	cmd := exec.CommandContext(ctx, self, args...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("%s on %s: %v", p.name, w.key, err)
	}
	var r result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return result{}, fmt.Errorf("%s on %s: bad output %q: %v", p.name, w.key, stdout.String(), err)
	}
	return r, nil
}
