// Quickstart is the README's first program: a pool of four workers
// squares ten numbers.
package main

import (
	"fmt"

	"github.com/dispatchkit/workerpool"
)

func main() {
	p := workerpool.New(4) // at most 4 tasks run at once

	squares := make([]int, 10)
	for i := range squares {
		p.Submit(func() { squares[i] = i * i })
	}

	p.StopWait() // run everything submitted, then release the workers
	fmt.Println(squares)
}
