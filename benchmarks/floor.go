package main

import (
	"sync"

	"github.com/gammazero/deque"
)

// The floor: the cheapest code of the library's shape, with none of its
// features. One dispatcher goroutine receives tasks on an unbuffered
// channel, hands each to a worker (started on demand, up to the limit) and
// parks the rest in a deque; no reaping, no counters, no stop but the final
// one. It comes in two variants, which differ in how a task reaches a
// worker:
//
//   - floor-buffered: over a channel with a buffer of 64, from which a
//     worker that comes free takes its next task without waiting for the
//     dispatcher. A task that lands in the buffer while fewer than the
//     limit of workers exist goes to a new worker instead.
//   - floor-direct: over an unbuffered channel, as gammazero/workerpool
//     does. A send succeeds only if a worker is parked; else the dispatcher
//     starts a worker, or else queues the task. A worker is never started
//     while another is parked.
//
// Ours is measured against the faster of the two, workload by workload:
// what it pays above that is what its features cost.

// floorPool is both variants: buffer is the capacity of the channel to the
// workers.
type floorPool struct {
	tasks chan func() // submissions, unbuffered
	work  chan func() // to the workers
	done  chan struct{}
	max   int
	wg    sync.WaitGroup // the workers
	task  func()
}

func newFloorBuffered(maxWorkers int, task func()) pool { return newFloor(maxWorkers, 64, task) }
func newFloorDirect(maxWorkers int, task func()) pool   { return newFloor(maxWorkers, 0, task) }

func newFloor(maxWorkers, buffer int, task func()) *floorPool {
	f := &floorPool{
		tasks: make(chan func()),
		work:  make(chan func(), buffer),
		done:  make(chan struct{}),
		max:   maxWorkers,
		task:  task,
	}
	go f.dispatch()
	return f
}

// dispatch is the dispatcher goroutine. It ends once tasks is closed and
// every queued task has been handed out and run.
func (f *floorPool) dispatch() {
	var queue deque.Deque[func()]
	workers := 0
	for {
		if queue.Len() == 0 {
			t, ok := <-f.tasks
			if !ok {
				break
			}
			if !f.place(t, &workers) {
				queue.PushBack(t)
			}
			continue
		}
		select {
		case t, ok := <-f.tasks:
			if !ok {
				for queue.Len() > 0 {
					f.work <- queue.PopFront()
				}
				f.stop()
				return
			}
			queue.PushBack(t)
		case f.work <- queue.Front():
			queue.PopFront()
		}
	}
	f.stop()
}

// place hands t to a parked worker, or to a new one if fewer than max
// exist, or to the buffer, and reports whether it did. A send on a buffered
// channel cannot tell a parked worker from room in the buffer: a task that
// lands in the buffer while fewer than max workers exist is taken back and
// given to a new worker, unless a worker took it meanwhile.
func (f *floorPool) place(t func(), workers *int) bool {
	select {
	case f.work <- t:
		if len(f.work) > 0 && *workers < f.max {
			select {
			case t = <-f.work:
				f.start(t, workers)
			default: // a worker took it
			}
		}
		return true
	default:
		if *workers < f.max {
			f.start(t, workers)
			return true
		}
		return false
	}
}

// start starts a worker whose first task is t.
func (f *floorPool) start(t func(), workers *int) {
	*workers++
	f.wg.Add(1)
	go f.worker(t)
}

// stop tells the workers to exit once the buffer is empty, and waits.
func (f *floorPool) stop() {
	close(f.work)
	f.wg.Wait()
	close(f.done)
}

// worker runs first, then every task it receives, until work is closed.
func (f *floorPool) worker(first func()) {
	defer f.wg.Done()
	first()
	for t := range f.work {
		t()
	}
}

// floorWait is the floor's submit-and-wait: the task and a WaitGroup in one
// object, whose method value is the func submitted.
type floorWait struct {
	task func()
	wg   sync.WaitGroup
}

func (w *floorWait) run() { w.task(); w.wg.Done() }

func (f *floorPool) Go() { f.tasks <- f.task }

func (f *floorPool) GoWait() {
	w := &floorWait{task: f.task}
	w.wg.Add(1)
	f.tasks <- w.run
	w.wg.Wait()
}

func (f *floorPool) Close() {
	close(f.tasks)
	<-f.done
}
