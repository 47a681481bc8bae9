// Pair measures two builds of the benchmark harness against each other,
// workload by workload, as benchmarks/PAIRS.md reports them: each round
// runs both children in turn (A B, then B A in the next round, so that
// neither always goes first), after a warm-up round, and takes the ratio
// A/B of the child's wall time (its own measure, pool creation to
// teardown) and of the whole process's CPU time (user + system, from the
// operating system). It prints, per workload, the median of the rounds'
// ratios, with the lowest and highest.
//
//	go build -o /tmp/a . ; (checkout B) go build -o /tmp/b .
//	go run ./pair -a /tmp/a -b /tmp/b -rounds 8
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	a := flag.String("a", "", "the harness binary A (the numerator)")
	b := flag.String("b", "", "the harness binary B (the denominator)")
	rounds := flag.Int("rounds", 8, "counted rounds per workload")
	works := flag.String("workloads", "tiny-1,tiny-100,tiny-10k,tiny-1m,sleep-1,sleep-1k,cpu,wait", "comma-separated workloads")
	quick := flag.Bool("quick", false, "the workloads' quick sizes")
	tiny := flag.Int("tiny-iters", 50, "spin rounds of a tiny task, the same for both")
	cpu := flag.Int("cpu-iters", 20000, "spin rounds of a cpu task, the same for both")
	flag.Parse()
	if *a == "" || *b == "" {
		fmt.Fprintln(os.Stderr, "pair: -a and -b are required")
		os.Exit(2)
	}
	fmt.Printf("A %s, B %s: %d rounds after a warm-up; median A/B (min-max)\n", *a, *b, *rounds)
	fmt.Printf("%-10s %-24s %-24s\n", "workload", "wall", "cpu")
	for _, w := range strings.Split(*works, ",") {
		args := []string{"-child", "-pool", "ours", "-workload", w, fmt.Sprintf("-tiny-iters=%d", *tiny), fmt.Sprintf("-cpu-iters=%d", *cpu)}
		if *quick {
			args = append(args, "-quick")
		}
		var walls, cpus []float64
		for r := -1; r < *rounds; r++ {
			first, second := *a, *b
			if r%2 != 0 {
				first, second = *b, *a
			}
			m1, err1 := measure(first, args)
			m2, err2 := measure(second, args)
			if err1 != nil || err2 != nil {
				fmt.Fprintln(os.Stderr, "pair:", w, err1, err2)
				os.Exit(1)
			}
			if r < 0 {
				continue // the warm-up
			}
			ma, mb := m1, m2
			if first != *a {
				ma, mb = m2, m1
			}
			walls = append(walls, ma.wall/mb.wall)
			cpus = append(cpus, ma.cpu/mb.cpu)
		}
		fmt.Printf("%-10s %-24s %-24s\n", w, summary(walls), summary(cpus))
	}
}

type measurement struct{ wall, cpu float64 }

// measure runs the child once and returns its wall time, as it measured
// it, and its process's CPU time.
func measure(bin string, args []string) (measurement, error) {
	cmd := exec.Command(bin, args...)
	out, err := cmd.Output()
	if err != nil {
		return measurement{}, fmt.Errorf("%s: %w", bin, err)
	}
	var r struct{ WallNs int64 }
	if err := json.Unmarshal(out, &r); err != nil {
		return measurement{}, fmt.Errorf("%s: %w: %q", bin, err, out)
	}
	st := cmd.ProcessState
	return measurement{wall: float64(r.WallNs), cpu: float64(st.UserTime() + st.SystemTime())}, nil
}

// summary formats the median of xs, with the lowest and highest.
func summary(xs []float64) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("%.3f (%.3f-%.3f)", med, s[0], s[len(s)-1])
}
