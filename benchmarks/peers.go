package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/alitto/pond/v2"
	ours "github.com/dispatchkit/workerpool"
	gammazero "github.com/gammazero/workerpool"
	"github.com/panjf2000/ants/v2"
	conc "github.com/sourcegraph/conc/pool"
	"golang.org/x/sync/errgroup"
)

// A pool is one peer under test, built around the single task function it
// runs. Building it around one task lets each adapter prepare, once, any
// wrapper its library needs (errgroup's func() error, for example), so that
// the per-task costs measured are the library's and not the adapter's.
//
// Every method is called from many user goroutines at once, except Close,
// which is called once, after every Go and GoWait has returned.
type pool interface {
	// Go submits the task and returns without waiting for it to run.
	Go()
	// GoWait submits the task and returns once it has run.
	GoWait()
	// Close waits for every submitted task to finish and releases the
	// pool's goroutines.
	Close()
}

// A peer is a pool library under test.
type peer struct {
	name  string // short name, used on the command line and in tables
	title string // what it is, for the report
	// bounded is false for a peer that cannot be given a maximum number of
	// workers. Such a peer is shown for reference but is never the "best
	// other" pool that ours is compared with.
	bounded bool
	// new returns a pool of at most maxWorkers workers that runs task.
	new func(maxWorkers int, task func()) pool
}

// peers lists every pool under test, ours first.
var peers = []peer{
	{"ours", "dispatchkit/workerpool (this module)", true, newOurs},
	{"gammazero", "gammazero/workerpool", true, newGammazero},
	{"ants", "panjf2000/ants/v2", true, newAnts},
	{"pond", "alitto/pond/v2", true, newPond},
	{"conc", "sourcegraph/conc/pool", true, newConc},
	{"errgroup", "x/sync/errgroup with SetLimit", true, newErrgroup},
	{"chanpool", "hand-written channel pool", true, newChanPool},
	{"goroutines", "go + sync.WaitGroup (unbounded)", false, newGoroutines},
	{"floor-buffered", "the floor: the shape alone, buffered hand-off", true, newFloorBuffered},
	{"floor-direct", "the floor: the shape alone, direct hand-off", true, newFloorDirect},
}

// findPeer returns the peer called name.
func findPeer(name string) (peer, error) {
	for _, p := range peers {
		if p.name == name {
			return p, nil
		}
	}
	return peer{}, fmt.Errorf("unknown pool %q", name)
}

// must panics if err is not nil: a submission that fails is a broken
// measurement, and the child process must fail loudly.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// withDone is the natural submit-and-wait idiom for a pool that has none:
// it returns a task that runs task and then closes the returned channel,
// which the caller waits on after submitting. It costs a closure and a
// channel per task.
func withDone(task func()) (func(), <-chan struct{}) {
	done := make(chan struct{})
	return func() { task(); close(done) }, done
}

// ours: New, Submit, SubmitWait, StopWait.

type oursPool struct {
	p    *ours.Pool
	task func()
}

func newOurs(maxWorkers int, task func()) pool {
	return &oursPool{ours.New(maxWorkers), task}
}

func (a *oursPool) Go()     { must(a.p.Submit(a.task)) }
func (a *oursPool) GoWait() { must(a.p.SubmitWait(a.task)) }
func (a *oursPool) Close()  { a.p.StopWait() }

// gammazero/workerpool: the same dispatcher shape as ours, with its own
// SubmitWait.

type gammazeroPool struct {
	p    *gammazero.WorkerPool
	task func()
}

func newGammazero(maxWorkers int, task func()) pool {
	return &gammazeroPool{gammazero.New(maxWorkers), task}
}

func (a *gammazeroPool) Go()     { a.p.Submit(a.task) }
func (a *gammazeroPool) GoWait() { a.p.SubmitWait(a.task) }
func (a *gammazeroPool) Close()  { a.p.StopWait() }

// ants: Submit blocks while every worker is busy (ants has no queue), so
// once every Submit has returned every task has a worker, and
// ReleaseTimeout, which waits for all workers to exit, waits for them all.

type antsPool struct {
	p    *ants.Pool
	task func()
}

func newAnts(maxWorkers int, task func()) pool {
	p, err := ants.NewPool(maxWorkers)
	must(err)
	return &antsPool{p, task}
}

func (a *antsPool) Go() { must(a.p.Submit(a.task)) }

func (a *antsPool) GoWait() {
	t, done := withDone(a.task)
	must(a.p.Submit(t))
	<-done
}

func (a *antsPool) Close() { must(a.p.ReleaseTimeout(time.Hour)) }

// pond: Go for fire-and-forget, Submit(f).Wait() to wait.

type pondPool struct {
	p    pond.Pool
	task func()
}

func newPond(maxWorkers int, task func()) pool {
	return &pondPool{pond.NewPool(maxWorkers), task}
}

func (a *pondPool) Go()     { must(a.p.Go(a.task)) }
func (a *pondPool) GoWait() { must(a.p.Submit(a.task).Wait()) }
func (a *pondPool) Close()  { a.p.StopAndWait() }

// conc: Go blocks while every goroutine is busy; Wait waits for all.

type concPool struct {
	p    *conc.Pool
	task func()
}

func newConc(maxWorkers int, task func()) pool {
	return &concPool{conc.New().WithMaxGoroutines(maxWorkers), task}
}

func (a *concPool) Go() { a.p.Go(a.task) }

func (a *concPool) GoWait() {
	t, done := withDone(a.task)
	a.p.Go(t)
	<-done
}

func (a *concPool) Close() { a.p.Wait() }

// errgroup: SetLimit bounds the goroutines; Go blocks at the limit and
// starts a new goroutine per task.

type errgroupPool struct {
	g    *errgroup.Group
	task func()
	run  func() error // the task, wrapped once
}

func newErrgroup(maxWorkers int, task func()) pool {
	g := new(errgroup.Group)
	g.SetLimit(maxWorkers)
	return &errgroupPool{g, task, func() error { task(); return nil }}
}

func (a *errgroupPool) Go() { a.g.Go(a.run) }

func (a *errgroupPool) GoWait() {
	done := make(chan struct{})
	a.g.Go(func() error { a.task(); close(done); return nil })
	<-done
}

func (a *errgroupPool) Close() { must(a.g.Wait()) }

// chanPool is the pool one writes by hand: maxWorkers goroutines, started
// at once, ranging over an unbuffered channel of tasks.

type chanPool struct {
	tasks chan func()
	wg    sync.WaitGroup
	task  func()
}

func newChanPool(maxWorkers int, task func()) pool {
	c := &chanPool{tasks: make(chan func()), task: task}
	c.wg.Add(maxWorkers)
	for range maxWorkers {
		go c.work()
	}
	return c
}

func (c *chanPool) work() {
	defer c.wg.Done()
	for t := range c.tasks {
		t()
	}
}

func (c *chanPool) Go() { c.tasks <- c.task }

func (c *chanPool) GoWait() {
	t, done := withDone(c.task)
	c.tasks <- t
	<-done
}

func (c *chanPool) Close() {
	close(c.tasks)
	c.wg.Wait()
}

// goroutines starts one goroutine per task and ignores maxWorkers: the
// baseline that a pool has to be worth using over.

type goroutines struct {
	wg  sync.WaitGroup
	run func() // the task, then wg.Done; prepared once
}

func newGoroutines(_ int, task func()) pool {
	g := new(goroutines)
	g.run = func() { task(); g.wg.Done() }
	return g
}

func (g *goroutines) Go() {
	g.wg.Add(1)
	go g.run()
}

func (g *goroutines) GoWait() {
	t, done := withDone(g.run)
	g.wg.Add(1)
	go t()
	<-done
}

func (g *goroutines) Close() { g.wg.Wait() }
