package main

import (
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

// TestReportAndChartNameEveryPool renders a small table.
func TestReportAndChartNameEveryPool(t *testing.T) {
	cfg := config{peers: peers, workloads: workloads[:2]}
	runs := make(map[string][]result)
	for _, w := range cfg.workloads {
		for i, p := range peers {
			runs[cellKey(w.key, p.name)] = []result{{Tasks: 100, WallNs: int64(1000 * (i + 1)), Procs: 2}}
		}
	}
	tb := summarize(cfg, runs)
	if best := tb.rows[0].best; peers[best].name != "gammazero" {
		t.Errorf("best other = %s, want gammazero (the fastest pool but ours)", peers[best].name)
	}
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
	// ours 10 ns, gammazero (the best other) 20 ns: 0.50× of both, within
	// the tiny workloads' target of 2.0× the best other and 0.8× gammazero.
	if !strings.Contains(md, "| 10.0 | 20.0 | 0.50× | gammazero | 20.0 | 0.50× | ≤ 2.0× | yes |") {
		t.Errorf("report lacks ours / gammazero and ours / best other = 0.50×, target met:\n%s", md)
	}
}

// TestReportMeetsATargetOnlyWithinBoth checks the summary's met column: ours
// must be within 0.8× gammazero and within the workload's target over the
// best other pool (2.0× for tiny tasks, one user).
func TestReportMeetsATargetOnlyWithinBoth(t *testing.T) {
	for _, c := range []struct {
		name                 string
		ours, gz, ants, rest int64 // ns per task; rest: every other pool
		want                 string
	}{
		{"within both", 10, 20, 30, 40, "| ≤ 2.0× | yes |"},
		{"over 0.8× gammazero", 18, 20, 30, 40, "| ≤ 2.0× | **no** |"},
		{"over 2.0× the best other", 30, 100, 10, 40, "| ≤ 2.0× | **no** |"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config{peers: peers, workloads: workloads[:1]}
			runs := make(map[string][]result)
			for _, p := range peers {
				ns := map[string]int64{"ours": c.ours, "gammazero": c.gz, "ants": c.ants}[p.name]
				if ns == 0 {
					ns = c.rest
				}
				runs[cellKey(workloads[0].key, p.name)] = []result{{Tasks: 1, WallNs: ns, Procs: 2}}
			}
			md := report(env{command: "go run .", reps: 1}, summarize(cfg, runs), "")
			if !strings.Contains(md, c.want) {
				t.Errorf("report lacks %q:\n%s", c.want, md)
			}
		})
	}
}
