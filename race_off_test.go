//go:build !race

package workerpool_test

// raceEnabled says whether the tests run under the race detector, which
// makes them several times slower; long tests use it to choose their size.
const raceEnabled = false
