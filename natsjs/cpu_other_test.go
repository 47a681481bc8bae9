//go:build !unix

package natsjs_test

import "time"

// cpuTime returns 0 where getrusage is missing: the benchmark then reports
// no CPU time.
func cpuTime() time.Duration { return 0 }
