package workerpool_test

import (
	"context"

	"github.com/dispatchkit/workerpool"
)

// stoppers are the three ways to stop a pool, for promises that hold for each.
var stoppers = []struct {
	name string
	stop func(*workerpool.Pool)
}{
	{"Stop", func(p *workerpool.Pool) { p.Stop() }},
	{"StopWait", (*workerpool.Pool).StopWait},
	{"Shutdown", func(p *workerpool.Pool) { _, _ = p.Shutdown(context.Background()) }},
}
