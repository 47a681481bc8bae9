package workerpool_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dispatchkit/workerpool"
)

func Example() {
	p := workerpool.New(4) // at most 4 tasks run at once

	squares := make([]int, 10)
	for i := range squares {
		if err := p.Submit(func() { squares[i] = i * i }); err != nil {
			log.Fatal(err) // ErrStopped, ErrNilTask, or ErrQueueFull under Reject
		}
	}

	p.StopWait() // run everything submitted, then release the workers
	fmt.Println(squares)
	// Output: [0 1 4 9 16 25 36 49 64 81]
}

func ExamplePool_SubmitWait() {
	p := workerpool.New(2)
	defer p.StopWait()

	// SubmitWait returns once the task has run, and sees what it wrote.
	var answer int
	if err := p.SubmitWait(func() { answer = 42 }); err != nil {
		fmt.Println(err)
	}
	fmt.Println("answer:", answer)

	// A panic comes back as a *PanicError; the pool keeps its workers.
	err := p.SubmitWait(func() { panic("out of cheese") })
	var pe *workerpool.PanicError
	if errors.As(err, &pe) {
		fmt.Println("panic value:", pe.Value)
	}
	fmt.Println(err)
	// Output:
	// answer: 42
	// panic value: out of cheese
	// workerpool: task panicked: out of cheese
}

func ExamplePool_Shutdown() {
	p := workerpool.New(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()

	// A slow task holds the only worker until the deadline; three more
	// wait behind it.
	tasks := []func(){func() { <-ctx.Done() }}
	for i := range 3 {
		tasks = append(tasks, func() { fmt.Println("task", i) })
	}
	for _, task := range tasks {
		if err := p.Submit(task); err != nil {
			log.Fatal(err)
		}
	}

	// Shutdown waits for the slow task, but the deadline passes first: the
	// tasks that never started come back. They are opaque funcs: run them
	// elsewhere, or count or log them. (A task someone waits for, as with
	// SubmitWait or Call, goes to its waiter as ErrStopped instead.)
	left, err := p.Shutdown(ctx)
	fmt.Printf("%d tasks not started: %v\n", len(left), err)
	for _, task := range left {
		task()
	}
	// Output:
	// 3 tasks not started: context deadline exceeded
	// task 0
	// task 1
	// task 2
}

func ExampleWithMaxWaiting() {
	// One worker and room for two waiting tasks. When the queue is full,
	// Submit waits for room (the default Block policy); TrySubmit does not.
	p := workerpool.New(1, workerpool.WithMaxWaiting(2))

	release := make(chan struct{})
	for _, task := range []func(){
		func() { <-release }, // holds the only worker
		func() { fmt.Println("task 1") },
		func() { fmt.Println("task 2") },
	} {
		if err := p.Submit(task); err != nil {
			log.Fatal(err)
		}
	}

	fmt.Println("TrySubmit:", p.TrySubmit(func() { fmt.Println("never runs") }))

	go close(release) // the worker frees up soon
	// Submit waits until there is room.
	if err := p.Submit(func() { fmt.Println("task 3") }); err != nil {
		log.Fatal(err)
	}
	p.StopWait()
	// Output:
	// TrySubmit: workerpool: waiting queue is full
	// task 1
	// task 2
	// task 3
}

func ExampleWithOverflow() {
	// With Reject, a submission to the full queue fails at once.
	p := workerpool.New(1,
		workerpool.WithMaxWaiting(1),
		workerpool.WithOverflow(workerpool.Reject))

	release := make(chan struct{})
	if err := p.Submit(func() { <-release }); err != nil { // holds the only worker
		log.Fatal(err)
	}
	for i := range 3 {
		fmt.Println("submit", i, "->", p.Submit(func() {}))
	}
	close(release)
	p.StopWait()
	fmt.Println("rejected:", p.Status().Rejected)
	// Output:
	// submit 0 -> <nil>
	// submit 1 -> workerpool: waiting queue is full
	// submit 2 -> workerpool: waiting queue is full
	// rejected: 2
}

func ExamplePool_Status() {
	p := workerpool.New(4, workerpool.WithPanicHandler(func(*workerpool.PanicError) {}))
	for range 10 {
		if err := p.Submit(func() {}); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Submit(func() { panic("oops") }); err != nil {
		log.Fatal(err)
	}
	p.StopWait()

	s := p.Status()
	fmt.Println("state:", s.State)
	fmt.Println("max workers:", s.MaxWorkers, "workers:", s.Workers)
	fmt.Println("submitted:", s.Submitted, "completed:", s.Completed, "panicked:", s.Panicked)
	fmt.Println("waiting:", s.Waiting, "abandoned:", s.Abandoned)
	// Output:
	// state: stopped
	// max workers: 4 workers: 0
	// submitted: 11 completed: 11 panicked: 1
	// waiting: 0 abandoned: 0
}
