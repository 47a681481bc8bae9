//go:build !workerpool_checkloop

package workerpool

// checkLoop checks the loop's invariant (see loopcheck_on.go) in the build
// with the tag workerpool_checkloop, and does nothing in the others.
func checkLoop(*loop) {}
