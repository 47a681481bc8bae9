// Quickstart is the README's first program: a pool of four workers
// squares ten numbers.
package main

import (
	"fmt"
	"log"

	"github.com/dispatchkit/workerpool"
)

func main() {
	p := workerpool.New(4) // at most 4 tasks run at once

	squares := make([]int, 10)
	for i := range squares {
		if err := p.Submit(func() { squares[i] = i * i }); err != nil {
			log.Fatal(err) // ErrStopped, ErrNilTask, or ErrQueueFull under Reject
		}
	}

	p.StopWait() // run everything submitted, then release the workers
	fmt.Println(squares)
}
