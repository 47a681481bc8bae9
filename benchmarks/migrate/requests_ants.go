package migrate

import (
	"container/heap"
	"sync"

	"github.com/panjf2000/ants/v2"
)

// antsRequests runs requests on an ants pool, before the migration: a
// priority queue in front of the pool, which one goroutine, the pump,
// feeds to it. While every worker is busy, ants' Submit blocks the pump,
// so that waiting requests wait in the priority queue. The program counts
// each request it hands to the pool in running until it ends.
type antsRequests struct {
	pool *ants.Pool

	mu      sync.Mutex
	more    *sync.Cond // signalled when a request comes or Close is called
	queue   requestQueue
	seq     int
	closing bool

	running sync.WaitGroup
	pumped  chan struct{} // closed when the pump returns
}

func newAntsRequests(workers int) (*antsRequests, error) {
	pool, err := ants.NewPool(workers)
	if err != nil {
		return nil, err
	}
	r := &antsRequests{pool: pool, pumped: make(chan struct{})}
	r.more = sync.NewCond(&r.mu)
	return r, nil
}

// Do queues run with priority.
func (r *antsRequests) Do(priority int, run func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	heap.Push(&r.queue, request{priority: priority, seq: r.seq, run: run})
	r.seq++
	r.more.Signal()
}

// Start starts the pump.
func (r *antsRequests) Start() { go r.pump() }

func (r *antsRequests) pump() {
	defer close(r.pumped)
	for {
		req, ok := r.next()
		if !ok {
			return
		}
		r.running.Add(1)
		if err := r.pool.Submit(func() { defer r.running.Done(); req.run() }); err != nil {
			r.running.Done()
		}
	}
}

// next waits for a request, and returns the next to run; false once Close
// was called and none is left.
func (r *antsRequests) next() (request, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.queue.Len() == 0 && !r.closing {
		r.more.Wait()
	}
	if r.queue.Len() == 0 {
		return request{}, false
	}
	return heap.Pop(&r.queue).(request), true
}

// Close takes no more requests, hands the queued ones to the pool,
// releases it and waits for every request handed to it to end.
func (r *antsRequests) Close() {
	r.mu.Lock()
	r.closing = true
	r.more.Broadcast()
	r.mu.Unlock()
	<-r.pumped
	r.pool.Release()
	r.running.Wait()
}
