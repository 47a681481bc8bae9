package main

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// A kind is what one task does.
type kind int

const (
	tiny  kind = iota // about 100 ns of arithmetic
	sleep             // time.Sleep(time.Millisecond)
	cpu               // about 40 µs of arithmetic
)

// A workload is a number of users, each a goroutine, that all submit the
// same number of tasks to one pool at the same time.
type workload struct {
	key   string // used on the command line
	title string // what it measures, for the report
	kind  kind
	// users and tasks (per user) in full mode, and in quick mode.
	users, tasks           int
	quickUsers, quickTasks int
	// maxWorkers is the limit every pool gets; 0 means GOMAXPROCS.
	maxWorkers int
	// wait makes each user submit its tasks one at a time and wait for
	// each (SubmitWait and its equivalents) instead of firing and
	// forgetting them.
	wait bool
}

// workloads lists every workload, in the order of the report.
var workloads = []workload{
	{"tiny-1", "tiny tasks (~100 ns), one user", tiny, 1, 1_000_000, 1, 100_000, 100, false},
	{"tiny-100", "tiny tasks, 100 users", tiny, 100, 10_000, 100, 1_000, 100, false},
	{"tiny-10k", "tiny tasks, 10K users", tiny, 10_000, 100, 10_000, 10, 100, false},
	{"tiny-1m", "tiny tasks, one task per user", tiny, 1_000_000, 1, 100_000, 1, 100, false},
	{"sleep-1", "1 ms sleeps, one user", sleep, 1, 200_000, 1, 20_000, 10_000, false},
	{"sleep-1k", "1 ms sleeps, 1K users", sleep, 1_000, 200, 1_000, 20, 10_000, false},
	{"cpu", "CPU-bound tasks (~40 µs), one user", cpu, 1, 20_000, 1, 2_000, 0, false},
	{"wait", "submit-and-wait of tiny tasks, 100 users", tiny, 100, 2_000, 100, 200, 8, true},
}

// findWorkload returns the workload whose key is key.
func findWorkload(key string) (workload, error) {
	for _, w := range workloads {
		if w.key == key {
			return w, nil
		}
	}
	return workload{}, fmt.Errorf("unknown workload %q", key)
}

// size returns the users, the tasks per user and the worker limit of w.
func (w workload) size(quick bool) (users, tasks, maxWorkers int) {
	users, tasks, maxWorkers = w.users, w.tasks, w.maxWorkers
	if quick {
		users, tasks = w.quickUsers, w.quickTasks
	}
	if maxWorkers == 0 {
		maxWorkers = runtime.GOMAXPROCS(0)
	}
	return users, tasks, maxWorkers
}

// label describes w's size, as "100 × 10K, max 100".
func (w workload) label(quick bool) string {
	users, tasks, max := w.size(quick)
	return fmt.Sprintf("%s × %s, max %s", count(users), count(tasks), count(max))
}

// count formats n briefly: 200, 10K, 1M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dK", n/1_000)
	}
	return fmt.Sprint(n)
}

// Iterations of spin in a tiny and a cpu task. The parent process
// calibrates them once and passes them to every child, so that all pools
// run the same work.
var tinyIters, cpuIters = 50, 20_000

// seed is a variable so that the compiler cannot compute spin's result.
var seed uint64 = 0x9e3779b97f4a7c15

// ran counts the tasks that ran. It sits alone in its cache line, so that
// it shares contention with nothing else.
var ran struct {
	_ [64]byte
	atomic.Int64
	_ [56]byte
}

// sink is written only if spin returns 0, which it never does; the branch
// keeps the compiler from deleting the arithmetic.
var sink atomic.Uint64

// spin runs n rounds of xorshift64 from x. Each round depends on the one
// before, so the rounds cannot overlap. Xorshift never reaches 0 from a
// nonzero x.
func spin(n int, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// taskFunc returns the task of kind k. Every task counts itself in ran.
func taskFunc(k kind) func() {
	switch k {
	case tiny:
		return tinyTask
	case cpu:
		return cpuTask
	}
	return sleepTask
}

func tinyTask() {
	if spin(tinyIters, seed) == 0 {
		sink.Add(1)
	}
	ran.Add(1)
}

func cpuTask() {
	if spin(cpuIters, seed) == 0 {
		sink.Add(1)
	}
	ran.Add(1)
}

func sleepTask() {
	time.Sleep(time.Millisecond)
	ran.Add(1)
}

// calibrate sets tinyIters and cpuIters so that a tiny task takes about
// 100 ns and a cpu task about 40 µs on this machine, by timing spin.
func calibrate() {
	// The fastest of many short trials: one that no other process
	// interrupted.
	const n = 1_000_000
	best := time.Duration(1<<63 - 1)
	for range 20 {
		start := time.Now()
		if spin(n, seed) == 0 {
			sink.Add(1)
		}
		best = min(best, time.Since(start))
	}
	perIter := float64(best) / n
	tinyIters = max(1, int(100/perIter+0.5))
	cpuIters = max(1, int(40_000/perIter+0.5))
}

// serialTime returns how long task takes when run on its own, one run
// after another: the fastest of ten batches of n/10 runs, per run, after a
// warm-up batch. The fastest batch is the one that other goroutines and
// processes disturbed least. Every run counts in ran.
func serialTime(task func(), n int) time.Duration {
	batch := max(1, n/10)
	for range batch {
		task()
	}
	best := time.Duration(1<<63 - 1)
	for range 10 {
		start := time.Now()
		for range batch {
			task()
		}
		best = min(best, time.Since(start))
	}
	return best / time.Duration(batch)
}
