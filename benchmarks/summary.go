package main

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// env describes the run and the machine, for the report.
type env struct {
	command             string
	quick               bool
	reps                int
	date                time.Time
	elapsed             time.Duration
	cpuModel            string
	cores, procs        int
	goVersion, platform string
	library             string        // the library's commit; see libraryVersion
	tinyNs, cpuNs       time.Duration // one task, run serially in the parent
	// otherCPU is the share of the machine's CPU that other processes
	// used during the run; negative if unknown.
	otherCPU float64
	maxOther float64 // config.maxOther
}

// describeEnv returns what is known of the run of cfg, started by command,
// before it measures anything: the rest is filled in as it goes.
func describeEnv(command string, cfg config) env {
	return env{
		command:   command,
		quick:     cfg.quick,
		reps:      cfg.reps,
		maxOther:  cfg.maxOther,
		date:      time.Now().UTC(),
		cpuModel:  cpuModel(),
		cores:     runtime.NumCPU(),
		procs:     runtime.GOMAXPROCS(0),
		goVersion: runtime.Version(),
		platform:  runtime.GOOS + "/" + runtime.GOARCH,
		library:   libraryVersion(),
	}
}

// A cell is the median of one pool's runs of one workload. The medians are
// taken metric by metric.
type cell struct {
	ok         bool    // the pool ran this workload
	ns         float64 // wall time per task
	allocs     float64 // per task
	bytes      float64 // per task
	goroutines float64 // peak
	heap       float64 // peak bytes
	wall       float64 // ns
	ideal      float64 // cpu workload: ideal wall ns
	vsIdeal    float64 // cpu workload: wall / ideal
	vsFloor    float64 // ns / the faster floor's ns; NaN if no floor ran
	other      float64 // share of the CPU other processes took; NaN if unknown
}

// A row is one workload, with a cell per peer.
type row struct {
	w     workload
	cells []cell // in the order of table.peers
	best  int    // index of the best other pool, or -1
	floor int    // index of the faster floor (see fasterFloor), or -1
}

// A table holds every median of the run.
type table struct {
	peers []peer
	rows  []row
	// Disturbance by other processes: measurements kept, those run again
	// first, and the median and largest share of the CPU that other
	// processes took during the kept ones (NaN if unknown).
	measurements, retried int
	otherMedian, otherMax float64
}

// isOther reports whether p can be the "best other" pool shown beside ours
// for information: any pool but ours and the floors that honours the
// worker limit.
func isOther(p peer) bool { return p.name != "ours" && p.bounded && !isFloor(p) }

// isFloor reports whether p is one of the two floor subjects (floor.go):
// not a peer, but the cost of the shape alone.
func isFloor(p peer) bool { return strings.HasPrefix(p.name, "floor-") }

// The targets of issue 15 ("Speed: the shape's floor") for ours, in every
// workload: at most floorTarget times the faster floor's ns/task, and at
// most gammazeroTarget times that of gammazero/workerpool, the one peer of
// the same shape. A workload meets its target only within both.
const (
	floorTarget     = 1.10
	gammazeroTarget = 1.00
)

// over returns the ns/task of the pool at index i over that of the pool at
// index j, or NaN if either is -1 or did not run.
func (r row) over(i, j int) float64 {
	if i < 0 || j < 0 || !r.cells[i].ok || !r.cells[j].ok {
		return math.NaN()
	}
	return r.cells[i].ns / r.cells[j].ns
}

// meetsTargets reports whether ours, the pool at index ours, is within
// floorTarget of the faster floor and within gammazeroTarget of
// gammazero, the pool at index gz. known is false if ours, the floors or
// gammazero did not run, so that there is nothing to judge.
func (r row) meetsTargets(ours, gz int) (met, known bool) {
	vsFloor, vsGz := r.over(ours, r.floor), r.over(ours, gz)
	if math.IsNaN(vsFloor) || math.IsNaN(vsGz) {
		return false, false
	}
	return vsFloor <= floorTarget && vsGz <= gammazeroTarget, true
}

// fasterFloor returns the index of the floor subject with the lowest
// ns/task among cells, or -1 if no floor ran. On a tie the first in peers
// wins.
func fasterFloor(peers []peer, cells []cell) int {
	floor := -1
	for i, p := range peers {
		if cells[i].ok && isFloor(p) && (floor < 0 || cells[i].ns < cells[floor].ns) {
			floor = i
		}
	}
	return floor
}

// summarize reduces the runs of every cell to medians and finds each
// workload's faster floor and best other pool.
func summarize(cfg config, runs map[string][]result) table {
	t := table{peers: cfg.peers}
	for _, w := range cfg.workloads {
		r := row{w: w, best: -1}
		for i, p := range cfg.peers {
			c := median(runs[cellKey(w.key, p.name)])
			r.cells = append(r.cells, c)
			if c.ok && isOther(p) && (r.best < 0 || c.ns < r.cells[r.best].ns) {
				r.best = i
			}
		}
		r.floor = fasterFloor(cfg.peers, r.cells)
		for i := range r.cells {
			r.cells[i].vsFloor = r.over(i, r.floor)
		}
		t.rows = append(t.rows, r)
	}
	var others []float64
	for _, rs := range runs {
		for _, r := range rs {
			t.measurements++
			t.retried += r.Retries
			if r.OtherCPU >= 0 {
				others = append(others, r.OtherCPU)
			}
		}
	}
	t.otherMedian, t.otherMax = math.NaN(), math.NaN()
	if len(others) > 0 {
		slices.Sort(others)
		t.otherMedian, t.otherMax = others[len(others)/2], others[len(others)-1]
	}
	return t
}

// median returns the cell of the runs rs of one pool on one workload.
func median(rs []result) cell {
	if len(rs) == 0 {
		return cell{}
	}
	of := func(f func(r result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if n := len(v); n%2 == 0 {
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	perTask := func(v float64, r result) float64 { return v / float64(r.Tasks) }
	ideal := func(r result) float64 { return r.TaskNs * float64(r.Tasks) / float64(r.Procs) }
	return cell{
		ok:         true,
		ns:         of(func(r result) float64 { return perTask(float64(r.WallNs), r) }),
		allocs:     of(func(r result) float64 { return perTask(float64(r.Mallocs), r) }),
		bytes:      of(func(r result) float64 { return perTask(float64(r.Bytes), r) }),
		goroutines: of(func(r result) float64 { return float64(r.PeakGoroutines) }),
		heap:       of(func(r result) float64 { return float64(r.PeakHeap) }),
		wall:       of(func(r result) float64 { return float64(r.WallNs) }),
		ideal:      of(ideal),
		vsIdeal:    of(func(r result) float64 { return float64(r.WallNs) / ideal(r) }),
		other: of(func(r result) float64 {
			if r.OtherCPU < 0 {
				return math.NaN()
			}
			return r.OtherCPU
		}),
	}
}
