//go:build unix

package natsjs_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time, user and system, that the process (the
// embedded server included) has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
