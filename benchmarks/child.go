package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

// A result is one measurement: one pool running one workload in a fresh
// process. The child prints it as JSON.
type result struct {
	Pool, Workload string
	Tasks          int64
	WallNs         int64   // pool creation to the end of its teardown
	Mallocs, Bytes uint64  // runtime.MemStats deltas over the same span
	PeakGoroutines uint64  // see samplerMethod
	PeakHeap       uint64  // bytes; see samplerMethod
	TaskNs         float64 // cpu workload: one task's time, run serially
	Procs          int     // GOMAXPROCS
	// OtherCPU is the share of the machine's CPU that other processes
	// used during the timed span; -1 if unknown. See cpuMeter.
	OtherCPU float64
	// Retries is how many disturbed runs the parent threw away before
	// this one; the child leaves it 0.
	Retries int
}

// The run under way. Users read it from package variables rather than from
// a closure, so that starting a user goroutine allocates nothing and the
// allocation counts are the pool's own.
var (
	curPool  pool
	curTasks int
	curUsers sync.WaitGroup
)

// fireUser submits curTasks tasks without waiting for them.
func fireUser() {
	defer curUsers.Done()
	for range curTasks {
		curPool.Go()
	}
}

// waitUser submits curTasks tasks one at a time, waiting for each.
func waitUser() {
	defer curUsers.Done()
	for range curTasks {
		curPool.GoWait()
	}
}

// runChild measures pool p on workload w and prints the result as JSON on
// stdout. It fails, with a non-zero exit, if any task did not run exactly
// once.
func runChild(p peer, w workload, quick bool) error {
	users, tasks, maxWorkers := w.size(quick)
	task := taskFunc(w.kind)
	total := int64(users) * int64(tasks)
	r := result{Pool: p.name, Workload: w.key, Tasks: total, Procs: runtime.GOMAXPROCS(0)}
	if w.kind == cpu {
		r.TaskNs = float64(serialTime(task, 1_000))
	}
	user := fireUser
	if w.wait {
		user = waitUser
	}

	ran.Store(0)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := startSampler(time.Millisecond)
	meter := startCPUMeter()
	start := time.Now()

	curPool, curTasks = p.new(maxWorkers, task), tasks
	curUsers.Add(users)
	for range users {
		go user()
	}
	curUsers.Wait()
	curPool.Close()

	r.WallNs = int64(time.Since(start))
	r.OtherCPU = -1
	if share, ok := meter.otherShare(runtime.NumCPU()); ok {
		r.OtherCPU = share
	}
	r.PeakGoroutines, r.PeakHeap = s.Stop()
	runtime.ReadMemStats(&after)
	r.Mallocs = after.Mallocs - before.Mallocs
	r.Bytes = after.TotalAlloc - before.TotalAlloc

	if got := ran.Load(); got != total {
		return fmt.Errorf("%s on %s: %d tasks ran, want exactly %d", p.name, w.key, got, total)
	}
	curPool = nil
	return json.NewEncoder(os.Stdout).Encode(r)
}
