package main

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEveryPeerRunsEveryTaskOnce runs each adapter from several users, fire
// and forget and submit-and-wait, and counts the runs after Close.
func TestEveryPeerRunsEveryTaskOnce(t *testing.T) {
	const users, tasks = 20, 200
	for _, p := range peers {
		for _, wait := range []bool{false, true} {
			name := p.name + "/go"
			if wait {
				name = p.name + "/wait"
			}
			t.Run(name, func(t *testing.T) {
				var n, running, most atomic.Int64
				task := func() {
					now := running.Add(1)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					time.Sleep(10 * time.Microsecond)
					running.Add(-1)
					n.Add(1)
				}
				pl := p.new(4, task)
				var wg sync.WaitGroup
				for range users {
					wg.Go(func() {
						for range tasks {
							if wait {
								pl.GoWait()
							} else {
								pl.Go()
							}
						}
					})
				}
				wg.Wait()
				pl.Close()
				if got := n.Load(); got != users*tasks {
					t.Errorf("%d tasks ran, want %d", got, users*tasks)
				}
				if p.bounded && most.Load() > 4 {
					t.Errorf("%d tasks ran at once, limit 4", most.Load())
				}
			})
		}
	}
}

// fakeRuns returns one run per pool of each workload, whose ns/task is
// ns(workload index, pool name); a pool for which ns returns 0 did not run.
func fakeRuns(ws []workload, ns func(w int, pool string) int64) map[string][]result {
	runs := make(map[string][]result)
	for wi, w := range ws {
		for _, p := range peers {
			if v := ns(wi, p.name); v > 0 {
				runs[cellKey(w.key, p.name)] = []result{{Tasks: 1, WallNs: v, Procs: 2}}
			}
		}
	}
	return runs
}

// targetRow returns the cells of workload title's row in the report's
// first table, ours against the floor and gammazero: workload, size, ours
// ns/task, faster floor, its ns/task, ours / floor, gammazero ns/task,
// ours / gammazero, target, met. It returns nil if there is no such row.
func targetRow(md, title string) []string {
	start := strings.Index(md, "## Ours against the floor and gammazero")
	if start < 0 {
		return nil
	}
	for _, line := range strings.Split(md[start:], "\n") {
		if strings.HasPrefix(line, "| "+title+" |") {
			return strings.Split(strings.Trim(line, "| "), " | ")
		}
	}
	return nil
}

// TestReportAndChartNameEveryPool renders a small table in which every pool
// ran, and checks that the report has a row and the chart a bar for each.
func TestReportAndChartNameEveryPool(t *testing.T) {
	ws := workloads[:2]
	// ours 10 ns, gammazero 20, ..., floor-buffered 90, floor-direct 100.
	runs := fakeRuns(ws, func(_ int, pool string) int64 {
		for i, p := range peers {
			if p.name == pool {
				return int64(10 * (i + 1))
			}
		}
		return 0
	})
	tb := summarize(config{peers: peers, workloads: ws}, runs)
	e := env{command: "go run .", reps: 1}
	md, svg := report(e, tb, "x.svg"), chart(e, tb)
	for _, p := range peers {
		if !strings.Contains(md, "| "+p.name+" |") && p.name != "ours" {
			t.Errorf("report has no row for %s", p.name)
		}
		if !strings.Contains(svg, ">"+p.name+"<") {
			t.Errorf("chart has no bar for %s", p.name)
		}
	}
	want := []string{ws[0].title, ws[0].label(false), "10.0", "floor-buffered", "90.0", "0.111×", "20.0", "0.500×",
		"≤ 1.10× floor, ≤ 1.00× gammazero", "yes"}
	if got := targetRow(md, ws[0].title); !slices.Equal(got, want) {
		t.Errorf("first table's row:\n got %q\nwant %q", got, want)
	}
	// The best other pool, for information: gammazero, the fastest pool
	// but ours and the floors.
	if !strings.Contains(md, "| "+ws[0].title+" | gammazero | 20.0 | 0.50× |") {
		t.Errorf("report lacks gammazero as the best other pool:\n%s", md)
	}
	// Per workload, ours is 10/90 of the faster floor.
	if !strings.Contains(md, "| **ours** | 10.0 | 0.11× |") {
		t.Errorf("report lacks ours × floor = 0.11×:\n%s", md)
	}
	if !strings.Contains(svg, "0.11× · 10.0 ns") || !strings.Contains(svg, "1.00× · 90.0 ns") {
		t.Errorf("chart lacks ours at 0.11× and floor-buffered at 1.00× of the floor:\n%s", svg)
	}
	if !strings.Contains(svg, ">1.10×: ours' target<") || !strings.Contains(svg, `fill="`+floorColor+`"`) {
		t.Errorf("chart lacks the target's legend or the floors' colour:\n%s", svg)
	}
}

// TestFasterFloorIsChosenPerWorkload checks that each workload is judged
// against whichever floor variant was faster in it.
func TestFasterFloorIsChosenPerWorkload(t *testing.T) {
	ws := workloads[:2]
	// floor-buffered is faster in the first workload, floor-direct in the
	// second; ours is 1.05× the faster one in both.
	ns := map[string][2]int64{
		"ours":           {105, 105},
		"gammazero":      {200, 200},
		"floor-buffered": {100, 150},
		"floor-direct":   {150, 100},
	}
	runs := fakeRuns(ws, func(w int, pool string) int64 {
		if v, ok := ns[pool]; ok {
			return v[w]
		}
		return 1000
	})
	tb := summarize(config{peers: peers, workloads: ws}, runs)
	md, svg := report(env{command: "go run .", reps: 1}, tb, ""), chart(env{reps: 1}, tb)
	for i, want := range []string{"floor-buffered", "floor-direct"} {
		if got := tb.rows[i].floor; got < 0 || peers[got].name != want {
			t.Errorf("workload %s: faster floor is %d, want %s", ws[i].key, got, want)
		}
		row := targetRow(md, ws[i].title)
		if len(row) != 10 || row[3] != want || row[4] != "100" || row[5] != "1.050×" || row[9] != "yes" {
			t.Errorf("workload %s: first table's row is %q, want %s at 100 ns, ours 1.050×, met", ws[i].key, row, want)
		}
		if head := "(faster floor: " + want + ", 100 ns)"; !strings.Contains(svg, head) {
			t.Errorf("workload %s: chart lacks %q", ws[i].key, head)
		}
	}
}

// TestReportMeetsTargetsOnlyWithinBoth checks the met column of the first
// table: ours must be within 1.10× the faster floor and no slower than
// gammazero, and a workload in which a reference did not run is not judged.
func TestReportMeetsTargetsOnlyWithinBoth(t *testing.T) {
	for _, c := range []struct {
		name string
		// ns per task; 0: did not run. Every other pool takes 1000.
		ours, gz, buffered, direct int64
		vsFloor, vsGz, met         string
	}{
		{"within both", 100, 120, 95, 200, "1.053×", "0.833×", "yes"},
		{"at both limits", 110, 110, 100, 100, "1.100×", "1.000×", "yes"},
		{"just over 1.10× the floor", 111, 200, 300, 100, "1.110×", "0.555×", "**no**"},
		{"slower than gammazero", 105, 104, 100, 120, "1.050×", "1.010×", "**no**"},
		{"over both", 200, 150, 100, 100, "2.000×", "1.333×", "**no**"},
		{"within 1.10× only of the slower floor", 120, 200, 110, 100, "1.200×", "0.600×", "**no**"},
		{"gammazero did not run", 100, 0, 100, 100, "1.000×", "–", "–"},
		{"no floor ran", 100, 200, 0, 0, "–", "0.500×", "–"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := map[string]int64{"ours": c.ours, "gammazero": c.gz, "floor-buffered": c.buffered, "floor-direct": c.direct}
			runs := fakeRuns(workloads[:1], func(_ int, pool string) int64 {
				if v, ok := ns[pool]; ok {
					return v
				}
				return 1000
			})
			md := report(env{command: "go run .", reps: 1}, summarize(config{peers: peers, workloads: workloads[:1]}, runs), "")
			row := targetRow(md, workloads[0].title)
			if len(row) != 10 {
				t.Fatalf("first table has no full row for %s:\n%s", workloads[0].title, md)
			}
			if row[5] != c.vsFloor || row[7] != c.vsGz || row[9] != c.met {
				t.Errorf("ours / floor %s, ours / gammazero %s, met %s; want %s, %s, %s",
					row[5], row[7], row[9], c.vsFloor, c.vsGz, c.met)
			}
		})
	}
}
