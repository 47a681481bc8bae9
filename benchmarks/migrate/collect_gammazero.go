package migrate

import (
	"sync"

	gammazero "github.com/gammazero/workerpool"
)

// gzCollector runs funcs on a gammazero pool and collects their results,
// before the migration. It embeds the pool, so that its users can call the
// pool's methods on it too.
type gzCollector[T any] struct {
	*gammazero.WorkerPool

	mu      sync.Mutex
	results []T
}

func newGzCollector[T any](workers int) *gzCollector[T] {
	return &gzCollector[T]{WorkerPool: gammazero.New(workers)}
}

// Go runs f on the pool and keeps its result. It panics once Results has
// been called, as gammazero's Submit does on a stopped pool.
func (c *gzCollector[T]) Go(f func() T) {
	c.Submit(func() { c.add(f()) })
}

func (c *gzCollector[T]) add(r T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results = append(c.results, r)
}

// Results waits for every func given to Go and returns their results, in
// the order they finished. The collector takes no more funcs.
func (c *gzCollector[T]) Results() []T {
	c.WorkerPool.StopWait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results
}
