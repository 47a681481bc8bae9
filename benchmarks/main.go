// Command benchmarks compares github.com/dispatchkit/workerpool with other Go
// worker pools, and with the floor (the cheapest code of its shape, in
// floor.go), on the same workloads, and writes the results as a Markdown
// table and an SVG chart.
//
// Run it from this directory:
//
//	go run .         # full: 5 repetitions, a few minutes on 2 cores
//	go run . -quick  # one repetition of smaller workloads, seconds
//
// Each measurement runs in a fresh process: the command re-executes its own
// binary with -child, which runs one pool on one workload and prints the
// result as JSON. Within each repetition the pools take turns, in an order
// that rotates, and the report gives the median of the repetitions.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	var (
		quick     = flag.Bool("quick", false, "one repetition of smaller workloads")
		reps      = flag.Int("reps", 5, "repetitions of every measurement (1 with -quick)")
		poolList  = flag.String("pools", "", "comma-separated pools to run (default all)")
		workList  = flag.String("workloads", "", "comma-separated workloads to run (default all)")
		out       = flag.String("out", "RESULTS.md", "Markdown report to write")
		svg       = flag.String("svg", "../docs/benchmarks.svg", "SVG chart to write")
		timeout   = flag.Duration("timeout", 10*time.Minute, "limit on one measurement")
		maxOther  = flag.Float64("max-other", 0.10, "run a measurement again if other processes took more than this share of the CPU")
		retries   = flag.Int("retries", 2, "most times to run a disturbed measurement again (0 with -quick)")
		child     = flag.Bool("child", false, "internal: measure one pool on one workload")
		childPool = flag.String("pool", "", "internal: the pool -child measures")
		childWork = flag.String("workload", "", "internal: the workload -child runs")
	)
	flag.IntVar(&tinyIters, "tiny-iters", 0, "internal: spin rounds in a tiny task (default: calibrate)")
	flag.IntVar(&cpuIters, "cpu-iters", 0, "internal: spin rounds in a cpu task (default: calibrate)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run . [-quick] [-reps n] [-pools a,b] [-workloads x,y] [-out file] [-svg file]\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	if *child {
		if err := childMain(*childPool, *childWork, *quick); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks:", err)
			os.Exit(1)
		}
		return
	}

	cfg := config{quick: *quick, reps: *reps, out: *out, svg: *svg, timeout: *timeout,
		maxOther: *maxOther, retries: *retries, quietWait: 5 * time.Minute}
	if cfg.quick {
		// A smoke test: no time spent on a busy machine.
		cfg.reps, cfg.retries = 1, 0
	}
	err := cfg.choose(*poolList, *workList)
	if err == nil {
		err = run(cfg, commandLine())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(1)
	}
}

// childMain is the -child mode: one pool, one workload, JSON on stdout.
func childMain(poolName, workKey string, quick bool) error {
	p, err := findPeer(poolName)
	if err != nil {
		return err
	}
	w, err := findWorkload(workKey)
	if err != nil {
		return err
	}
	if tinyIters < 1 || cpuIters < 1 {
		return fmt.Errorf("-child needs -tiny-iters and -cpu-iters")
	}
	return runChild(p, w, quick)
}

// commandLine returns the command as the user would type it in benchmarks/.
func commandLine() string {
	return strings.Join(append([]string{"go run ."}, os.Args[1:]...), " ")
}
