package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuModel returns the CPU's model name from /proc/cpuinfo, or "unknown
// CPU" where there is none.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for line := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				return strings.TrimSpace(strings.TrimLeft(name, " \t:"))
			}
		}
	}
	return "unknown CPU"
}

// A cpuMeter measures how much CPU time other processes took on the
// machine while this run went on: the machine's busy time from /proc/stat
// less this process's and its children's. A busy machine makes the numbers
// noisy, and the report says how busy it was.
type cpuMeter struct {
	start     time.Time
	busy, own time.Duration
	ok        bool
}

func startCPUMeter() cpuMeter {
	busy, ok := machineBusy()
	return cpuMeter{start: time.Now(), busy: busy, own: ownCPU(), ok: ok}
}

// otherShare returns the share of the machine's CPU capacity, 0 to 1, that
// other processes used since m started, and false if it cannot tell.
func (m cpuMeter) otherShare(cores int) (float64, bool) {
	busy, ok := machineBusy()
	if !m.ok || !ok {
		return 0, false
	}
	other := (busy - m.busy) - (ownCPU() - m.own)
	return max(0, float64(other)/float64(time.Since(m.start)*time.Duration(cores))), true
}

// waitQuiet waits, for at most limit, until other processes take at most
// share of the machine's CPU over half a second, and reports whether they
// did. This process must be idle meanwhile.
func waitQuiet(share float64, cores int, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		m := startCPUMeter()
		time.Sleep(500 * time.Millisecond)
		if other, ok := m.otherShare(cores); !ok || other <= share {
			return true
		}
	}
	return false
}

// machineBusy returns the CPU time all processes on the machine used since
// boot, steal time included, from the first line of /proc/stat.
func machineBusy() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, false
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal: all but idle, iowait.
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), true // USER_HZ is 100 on Linux
}

// ownCPU returns the CPU time of this process and of the children it has
// waited for.
func ownCPU() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// libraryPaths are the git pathspecs of the library under test, from the
// parent directory: its top-level Go files and module files, so that an
// edit to the README or to this module is not a change of library.
var libraryPaths = []string{":(glob)*.go", "go.mod", "go.sum"}

// libraryVersion describes the last commit that changed the library under
// test, with "+ local changes" if its files differ from that commit, or
// returns "" if git cannot tell.
func libraryVersion() string {
	args := append([]string{"-C", "..", "log", "-1", "--format=%h %cs %s", "--"}, libraryPaths...)
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return ""
	}
	v := strings.TrimSpace(string(out))
	args = append([]string{"-C", "..", "diff", "--quiet", "HEAD", "--"}, libraryPaths...)
	if exec.Command("git", args...).Run() != nil {
		v += " + local changes"
	}
	return v
}
