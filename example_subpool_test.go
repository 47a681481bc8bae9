package workerpool_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dispatchkit/workerpool"
)

func ExamplePool_Subpool() {
	p := workerpool.New(4) // 4 workers in all
	defer p.StopWait()

	// Mail gets at most one worker at a time; downloads at most two. Both
	// run on the pool's workers, and the pool's own tasks may use the rest.
	mail := p.Subpool("mail", 1)
	downloads := p.Subpool("downloads", 2)

	var running, most atomic.Int32
	for range 20 {
		mail.Submit(func() {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			running.Add(-1)
		})
		downloads.Submit(func() {})
	}

	mail.StopWait() // the pool and downloads go on
	downloads.StopWait()
	fmt.Println(mail.Name(), mail.Status().Completed, "completed, at most", most.Load(), "at once")
	fmt.Println(downloads.Name(), downloads.Status().Completed, "completed")
	// Output:
	// mail 20 completed, at most 1 at once
	// downloads 20 completed
}

// When a worker comes free, each queue that has a task it may start takes
// its turn: a flood in one sub-pool does not hold up the others.
func ExamplePool_Subpool_fairTurns() {
	p := workerpool.New(1) // one worker, so the start order is plain
	bulk := p.Subpool("bulk", 1)
	interactive := p.Subpool("interactive", 1)

	var mu sync.Mutex
	var order []string
	record := func(name string) func() {
		return func() {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
	}

	// Hold the worker while both queues fill: bulk floods first.
	ctx, resume := context.WithCancel(context.Background())
	p.Pause(ctx)
	for i := range 4 {
		bulk.Submit(record(fmt.Sprint("bulk", i)))
	}
	interactive.Submit(record("click0"))
	interactive.Submit(record("click1"))
	resume()

	p.StopWait()
	fmt.Println(strings.Join(order, " "))
	// Output: bulk0 click0 bulk1 click1 bulk2 bulk3
}

// Tasks with the same key run one at a time, in the order they were
// submitted; tasks with other keys run alongside them.
func ExamplePool_SubmitKey() {
	p := workerpool.New(4)

	accounts := []string{"alice", "bob", "carol"}
	history := map[string]*[]int{}
	for _, a := range accounts {
		history[a] = new([]int) // the map itself is only read from now on
	}
	for i := range 5 {
		for _, a := range accounts {
			h := history[a]
			// No lock: tasks with key a never overlap, and they start in
			// this order.
			if err := p.SubmitKey(a, func() { *h = append(*h, i) }); err != nil {
				log.Fatal(err)
			}
		}
	}

	p.StopWait()
	for _, a := range accounts {
		fmt.Println(a, *history[a])
	}
	// Output:
	// alice [0 1 2 3 4]
	// bob [0 1 2 3 4]
	// carol [0 1 2 3 4]
}
