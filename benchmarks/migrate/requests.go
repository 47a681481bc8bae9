package migrate

import (
	"container/heap"
	"sync"

	"github.com/dispatchkit/workerpool"
)

// requests is antsRequests migrated to workerpool: New for NewPool, and,
// for Release, the stop that Close is given. Mapping Release to Stop
// hangs Close: ants has no queue, so every request its Submit took was on
// a worker, and Release let it end; Stop drops the requests the pool
// accepted and did not start, and running waits for them for ever. Close
// wants StopWait, Shutdown, or to run what Stop returns.
type requests struct {
	pool *workerpool.Pool
	stop func(*workerpool.Pool) // was pool.Release()

	mu      sync.Mutex
	more    *sync.Cond // signalled when a request comes or Close is called
	queue   requestQueue
	seq     int
	closing bool

	running sync.WaitGroup
	pumped  chan struct{} // closed when the pump returns
}

func newRequests(workers int, stop func(*workerpool.Pool)) *requests {
	r := &requests{pool: workerpool.New(workers), stop: stop, pumped: make(chan struct{})}
	r.more = sync.NewCond(&r.mu)
	return r
}

// Do queues run with priority.
func (r *requests) Do(priority int, run func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	heap.Push(&r.queue, request{priority: priority, seq: r.seq, run: run})
	r.seq++
	r.more.Signal()
}

// Start starts the pump.
func (r *requests) Start() { go r.pump() }

func (r *requests) pump() {
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
func (r *requests) next() (request, bool) {
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

// Close takes no more requests, hands the queued ones to the pool, stops
// it and waits for every request handed to it to end.
func (r *requests) Close() {
	r.mu.Lock()
	r.closing = true
	r.more.Broadcast()
	r.mu.Unlock()
	<-r.pumped
	r.stop(r.pool)
	r.running.Wait()
}
