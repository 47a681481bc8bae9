//go:build !workerpool_checkloop

package workerpool

// checkLoop checks the loop's invariant (see dispatcher) in the build with
// the tag workerpool_checkloop, and does nothing in the others.
func checkLoop(*dispatcher) {}
