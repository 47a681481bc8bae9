// Command server runs a pool with two sub-pools under a load, serves its
// metrics at /metrics on a loopback port, scrapes itself halfway through
// and once the pool has stopped, and prints what the scrapes show.
//
//	cd prom && go run ./examples/server
//	cd prom && go run ./examples/server -duration 5s -full
//
// Every 10 ms it submits one mail task, which takes 25 ms, to the sub-pool
// mail, which runs two at once: 80 a second for the 100 that come, so its
// queue grows. It submits three 4 ms thumbnails to the sub-pool
// thumbnails, which runs three at once and keeps up, one of every hundred
// panicking, and one 1 ms task to the pool itself. The counts are the same
// on every run; the times and the gauges vary a little.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/prom"
)

func main() {
	duration := flag.Duration("duration", 2*time.Second, "length of the load")
	full := flag.Bool("full", false, "print the whole last scrape, not an excerpt")
	flag.Parse()
	if *duration < tick || flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "server: -duration must be at least %v, and there are no arguments (see -h)\n", tick)
		os.Exit(2)
	}
	if err := run(os.Stdout, *duration, *full); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// tick is how often the load submits its tasks.
const tick = 10 * time.Millisecond

// run serves the metrics, runs the load for about d, and prints the
// scrapes to out.
func run(out io.Writer, d time.Duration, full bool) error {
	p := workerpool.New(6,
		workerpool.WithTaskTimings(),
		// The thumbnails' panics are part of the show: count them, but do
		// not log their stacks.
		workerpool.WithPanicHandler(func(*workerpool.PanicError) {}),
	)
	mail := p.Subpool("mail", 2)
	thumbnails := p.Subpool("thumbnails", 3)

	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCollector("example", p))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(out, "serving %s for a load of %v\n", url, d)

	ticker := time.NewTicker(tick)
	ticks := int(d / tick)
	for i := range ticks {
		<-ticker.C
		if err := submit(p, mail, thumbnails, i); err != nil {
			return err
		}
		if i == ticks/2 {
			fmt.Fprintf(out, "\nhalfway, the tasks running and waiting:\n")
			if err := show(out, url, halfway); err != nil {
				return err
			}
		}
	}
	ticker.Stop()
	p.StopWait()

	keep, what := excerpt, "the counters above zero, the limits, and the sub-pools' waits"
	if full {
		keep, what = func(string) bool { return true }, "the whole scrape"
	}
	fmt.Fprintf(out, "\nafter StopWait, %s:\n", what)
	if err := show(out, url, keep); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// submit submits the tasks of the i-th tick.
func submit(p *workerpool.Pool, mail, thumbnails *workerpool.Subpool, i int) error {
	if err := mail.Submit(sleep(25 * time.Millisecond)); err != nil {
		return err
	}
	for j := range 3 {
		task := sleep(4 * time.Millisecond)
		if (3*i+j)%100 == 99 {
			task = func() { time.Sleep(4 * time.Millisecond); panic("bad image") }
		}
		if err := thumbnails.Submit(task); err != nil {
			return err
		}
	}
	return p.Submit(sleep(time.Millisecond))
}

func sleep(d time.Duration) func() { return func() { time.Sleep(d) } }

// show scrapes url as Prometheus would and prints the lines keep keeps.
func show(out io.Writer, url string, keep func(line string) bool) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape: %s", resp.Status)
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if keep(lines.Text()) {
			fmt.Fprintln(out, lines.Text())
		}
	}
	return lines.Err()
}

// halfway keeps the gauges of the tasks running and waiting.
func halfway(line string) bool {
	name, _, _ := strings.Cut(line, "{")
	return strings.HasSuffix(name, "_tasks_running") || strings.HasSuffix(name, "_tasks_waiting")
}

// excerpt keeps the counters above zero, the limits, and the sub-pools'
// wait histograms with only their buckets at 1 ms, 10 ms, 100 ms, 1 s and
// +Inf.
func excerpt(line string) bool {
	if strings.HasPrefix(line, "#") {
		return false
	}
	name, _, _ := strings.Cut(line, "{")
	switch {
	case strings.HasSuffix(name, "_total"):
		return !strings.HasSuffix(line, " 0")
	case strings.HasSuffix(name, "max_workers"):
		return true
	case name == "workerpool_subpool_task_wait_seconds_bucket":
		for _, le := range []string{`le="0.001"`, `le="0.01"`, `le="0.1"`, `le="1"`, `le="+Inf"`} {
			if strings.Contains(line, le) {
				return true
			}
		}
	case strings.HasPrefix(name, "workerpool_subpool_task_wait_seconds"):
		return true // _sum and _count
	}
	return false
}
