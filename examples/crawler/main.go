// Crawler crawls a small web that lives in memory, politely: on one pool,
// each host's pages are fetched one at a time, in the order found, at most
// one every 50 ms (a key, and a rate for each key), and a fetch that fails
// is tried again at a higher priority level: ahead of every first try of
// the pool that could go instead, though after its own host's pages found
// before it, as a key keeps its order. It prints what it fetched, host by
// host.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dispatchkit/workerpool"
)

// web is the pages of the web, by URL: their links. A page in flaky fails
// on its first fetch.
var web = map[string][]string{
	"a.example/":      {"a.example/docs", "b.example/", "c.example/"},
	"a.example/docs":  {"a.example/blog", "b.example/about"},
	"a.example/blog":  {"c.example/news"},
	"b.example/":      {"b.example/about", "b.example/shop"},
	"b.example/about": {"a.example/"},
	"b.example/shop":  {"c.example/"},
	"c.example/":      {"c.example/news", "c.example/jobs"},
	"c.example/news":  {"a.example/blog"},
	"c.example/jobs":  nil,
}

var flaky = map[string]bool{"b.example/shop": true, "c.example/news": true}

func main() {
	crawl(os.Stdout, "a.example/", 50*time.Millisecond)
}

// A crawler fetches every page reachable from a start, through pool p.
type crawler struct {
	p       *workerpool.Pool
	retries *workerpool.Level
	pending sync.WaitGroup

	mu      sync.Mutex
	seen    map[string]bool
	failed  map[string]bool      // pages whose first fetch failed
	fetches map[string][]fetched // by host
}

// fetched is one fetch: its page, when, and whether it was a retry.
type fetched struct {
	url   string
	at    time.Time
	retry bool
}

// crawl fetches every page reachable from start, at most one every gap on
// each host, and writes what it did to w.
func crawl(w io.Writer, start string, gap time.Duration) {
	p := workerpool.New(4)
	p.SetKeyRate(workerpool.Every(gap), 1) // each host: one fetch every gap
	c := &crawler{p: p, retries: p.Priority(1), seen: map[string]bool{}, failed: map[string]bool{}, fetches: map[string][]fetched{}}
	c.visit(start)
	c.pending.Wait()
	p.StopWait()

	hosts := make([]string, 0, len(c.fetches))
	for h := range c.fetches {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		fs := c.fetches[h]
		var pages []string
		retries, apart := 0, true
		for i, f := range fs {
			page := strings.TrimPrefix(f.url, h)
			if f.retry {
				page += " (retry)"
				retries++
			}
			pages = append(pages, page)
			if i > 0 && f.at.Sub(fs[i-1].at) < gap-gap/10 {
				apart = false
			}
		}
		spacing := "each at least " + gap.String() + " after the last"
		if !apart {
			spacing = "NOT spaced"
		}
		fmt.Fprintf(w, "%s: %d fetches, %d retries, %s: %v\n", h, len(fs), retries, spacing, strings.Join(pages, " "))
	}
	fmt.Fprintf(w, "%d pages, %d failed once\n", len(c.seen), len(failedOnce(c.failed)))
}

// failedOnce returns the pages whose first fetch failed.
func failedOnce(failed map[string]bool) []string {
	var pages []string
	for url, f := range failed {
		if f {
			pages = append(pages, url)
		}
	}
	return pages
}

// visit queues url, unless it was seen: with its host as its key, so that
// the host's rate and order apply.
func (c *crawler) visit(url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[url] {
		return
	}
	c.seen[url] = true
	c.submit(c.p, url, false)
}

// submit queues a fetch of url through s, a first try or a retry.
func (c *crawler) submit(s workerpool.Submitter, url string, retry bool) {
	host, _, _ := strings.Cut(url, "/")
	c.pending.Add(1)
	if err := s.SubmitKey(host, func() { c.fetch(url, retry) }); err != nil {
		c.pending.Done()
	}
}

// fetch fetches url, queues the pages it links to, and queues itself
// again, as a retry, if it failed.
func (c *crawler) fetch(url string, retry bool) {
	defer c.pending.Done()
	host, _, _ := strings.Cut(url, "/")
	c.mu.Lock()
	c.fetches[host] = append(c.fetches[host], fetched{url: url, at: time.Now(), retry: retry})
	fail := flaky[url] && !c.failed[url]
	c.failed[url] = c.failed[url] || fail
	c.mu.Unlock()
	if fail {
		c.mu.Lock()
		c.submit(c.retries, url, true) // ahead of the host's first tries
		c.mu.Unlock()
		return
	}
	for _, link := range web[url] {
		c.visit(link)
	}
}
