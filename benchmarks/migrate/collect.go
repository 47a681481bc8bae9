package migrate

import (
	"sync"

	"github.com/dispatchkit/workerpool"
)

// collector is gzCollector migrated to workerpool. The embedded field was
// named WorkerPool after its type; it is now named Pool, so each use of
// the field by name changed with it (here c.Pool.StopWait and the
// composite literal). Go returns Submit's error rather than dropping it.
type collector[T any] struct {
	*workerpool.Pool

	mu      sync.Mutex
	results []T
}

func newCollector[T any](workers int) *collector[T] {
	return &collector[T]{Pool: workerpool.New(workers)}
}

// Go runs f on the pool and keeps its result. It returns ErrStopped once
// Results has been called.
func (c *collector[T]) Go(f func() T) error {
	return c.Submit(func() { c.add(f()) })
}

func (c *collector[T]) add(r T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results = append(c.results, r)
}

// Results waits for every func given to Go and returns their results, in
// the order they finished. The collector takes no more funcs.
func (c *collector[T]) Results() []T {
	c.Pool.StopWait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results
}
