package main

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

// The demo shows what it says: on the fake clock, with the default flags
// and others, the pool has -max workers at the end of each burst, has
// rejected requests, and is down to -min workers at the end of each lull.
// (The bursts overload up to 46 workers: 700 requests a second of 75 ms.)
func TestWorkersFallToMinInEachLull(t *testing.T) {
	for _, c := range []struct {
		max, min, queue int
		total, idle     time.Duration
	}{
		{32, 2, 256, 10 * time.Second, 0}, // the defaults
		{32, 0, 256, 10 * time.Second, 0},
		{8, 4, 0, 20 * time.Second, 0},
		{32, 2, 256, 10 * time.Second, 3 * time.Second},
		{16, 8, 64, 5 * time.Second, 0},
	} {
		synctest.Test(t, func(t *testing.T) {
			idle := c.idle
			if idle == 0 {
				idle = c.total / 10
			}
			opts := []workerpool.Option{
				workerpool.WithMinWorkers(c.min),
				workerpool.WithIdleTimeout(idle),
				workerpool.WithPanicHandler(func(*workerpool.PanicError) {}),
			}
			if c.queue > 0 {
				opts = append(opts, workerpool.WithMaxWaiting(c.queue), workerpool.WithOverflow(workerpool.Reject))
			}
			p := workerpool.New(c.max, opts...)
			schedule := plan(c.total, idle, c.max, c.min, c.queue)
			var current atomic.Value
			lulls := 0
			ended := func(ph phase) {
				s := p.Status()
				switch {
				case ph.lull:
					lulls++
					if s.Workers != c.min {
						t.Errorf("%+v: %d workers at the end of %s, want -min %d", c, s.Workers, ph.name, c.min)
					}
				case ph.rate >= 700 && s.PeakWorkers != c.max:
					t.Errorf("%+v: peak of %d workers by the end of %s, want -max %d", c, s.PeakWorkers, ph.name, c.max)
				}
			}
			generate(context.Background(), p, schedule, time.Now(), rand.New(rand.NewPCG(1, 1)), &current, ended)
			p.StopWait()
			if lulls != 2 {
				t.Errorf("%+v: %d lulls, want 2", c, lulls)
			}
			if s := p.Status(); c.queue > 0 && s.Rejected == 0 {
				t.Errorf("%+v: no request rejected: the bursts did not fill the queue", c)
			}
		})
	}
}
