package workerpool_test

import (
	"runtime"
	"strings"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

// cleanUp ends a failed run as quietly as it can, so that the failure is
// reported rather than a deadlock of the bubble: it releases every task and
// pause, stops the pool and lets the clock run until every call returned.
func (m *fuzzModel) cleanUp() {
	if !m.t.Failed() {
		return
	}
	m.printTrace()
	m.identifying.Store(true) // no more checks in tasks
	for _, tk := range m.tasks {
		if tk.gate != nil && !tk.opened {
			tk.opened = true
			close(tk.gate)
		}
	}
	m.mu.Lock()
	m.stopIssued = true
	for _, pz := range m.pauses {
		pz.cancelled = true
		pz.cancel()
	}
	m.mu.Unlock()
	stopped := make(chan struct{})
	go func() { m.p.Stop(); close(stopped) }()
	for range len(m.tasks) + 10 {
		synctest.Wait()
		select {
		case <-stopped:
			if m.allDone() {
				return
			}
		default:
		}
		time.Sleep(time.Second)
	}
}

func (m *fuzzModel) allDone() bool {
	for _, op := range m.ops {
		if !op.done.Load() {
			return false
		}
	}
	return true
}

// bubbleGoroutines returns the stacks of the goroutines in the calling
// goroutine's synctest bubble, other than the caller and synctest's own.
func bubbleGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	self, _, _ := strings.Cut(stacks[0], "\n") // "goroutine N [running, synctest bubble B]:"
	_, bubble, ok := strings.Cut(self, "synctest bubble ")
	if !ok {
		return nil
	}
	var left []string
	for _, g := range stacks[1:] {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "synctest bubble "+bubble) &&
			!strings.Contains(g, "internal/synctest.Run(") &&
			!strings.Contains(g, "testing/synctest.testingSynctestTest(") {
			left = append(left, g)
		}
	}
	return left
}

// fuzzSeeds are the hand-written inputs: the scenarios the other tests
// specify one at a time, as starting points for the fuzzer. go test runs
// them, and those in testdata/fuzz/FuzzPool.
var fuzzSeeds = [][]byte{
	// Every kind of task through every kind of submission, then StopWait.
	fuzzSeed(2, 0, 0, workerpool.Block, 2, 1,
		fop(opSubmit, int(kindQuick)), fop(opSubmit, int(kindPanic)), fop(opSubmit, int(kindGoexit)),
		fop(opSubmitWait, int(kindPanic)), fop(opSubmitWait, int(kindGoexit)), fop(opTrySubmit, int(kindQuick)),
		fop(opSubmitCtxDone, int(kindQuick)), fop(opSubmitCtx, int(kindSleep)), fop(opSubmitWait, int(kindQuick))),
	// Stop drops the queue behind a blocked worker, waiters included.
	fuzzSeed(1, 0, 0, workerpool.Block, 0, 0,
		fop(opSubmit, int(kindBlock)), fop(opBurst, 2), fop(opSubmitWait, int(kindQuick)), fop(opSubmit, int(kindPanic)),
		fop(opStop, 0), fop(opSubmit, int(kindQuick)), fop(opReleaseAll, 0)),
	// Block overflow: submitters wait for room, then get in as it frees.
	fuzzSeed(1, 0, 1, workerpool.Block, 1, 1,
		fop(opSubmit, int(kindBlock)), fop(opSubmit, int(kindQuick)), fop(opSubmit, int(kindQuick)),
		fop(opSubmitWait, int(kindQuick)), fop(opSubmitCtx, 5+int(kindQuick)), fop(opTrySubmit, int(kindQuick)),
		fop(opAdvance, 3), fop(opRelease, 0), fop(opAdvance, 4)),
	// Reject overflow: a full queue refuses every kind of submission.
	fuzzSeed(1, 0, 2, workerpool.Reject, 0, 2,
		fop(opSubmit, int(kindBlock)), fop(opBurst, 3), fop(opSubmitWait, int(kindQuick)),
		fop(opSubmitCtx, int(kindQuick)), fop(opTrySubmit, int(kindQuick)), fop(opRelease, 0)),
	// CallerRuns: overflowing tasks, panics and Goexits run in the caller.
	fuzzSeed(1, 1, 1, workerpool.CallerRuns, 2, 1,
		fop(opSubmit, int(kindBlock)), fop(opSubmit, int(kindQuick)), fop(opSubmit, int(kindPanic)),
		fop(opSubmit, int(kindGoexit)), fop(opSubmitWait, int(kindPanic)), fop(opSubmitWait, int(kindGoexit)),
		fop(opSubmit, int(kindBlock)), fop(opReleaseAll, 0)),
	// Pauses hold new tasks; a second Pause queues behind the first.
	fuzzSeed(2, 0, 0, workerpool.Block, 0, 1,
		fop(opPause, 0), fop(opBurst, 2), fop(opSubmitWait, int(kindQuick)), fop(opAdvance, 2),
		fop(opPause, 0), fop(opResume, 0), fop(opSubmit, int(kindQuick)), fop(opResume, 0)),
	// Pause waits for a running task; Resize while paused starts nothing.
	fuzzSeed(3, 0, 2, workerpool.Block, 1, 1,
		fop(opSubmit, int(kindBlock)), fop(opSubmit, int(kindSleep)), fop(opPause, 0), fop(opBurst, 3),
		fop(opResize, 0), fop(opRelease, 0), fop(opAdvance, 2), fop(opResize, 3), fop(opResume, 0)),
	// Resize down below the busy workers, then up again.
	fuzzSeed(4, 0, 0, workerpool.Block, 0, 1,
		fop(opBurst, 4+3), fop(opResize, 0), fop(opBurst, 2), fop(opRelease, 0), fop(opRelease, 1),
		fop(opReleaseAll, 0), fop(opResize, 3), fop(opBurst, 3)),
	// Idle workers are reaped down to the minimum, and come back.
	fuzzSeed(4, 1, 0, workerpool.Block, 1, 0,
		fop(opTogether, 0), fop(opBurst, 3), fop(opBurst, 4+3), fop(opReleaseAll, 0), fop(opAdvance, 4),
		fop(opBurst, 3), fop(opAdvance, 4)),
	// A Shutdown deadline drops the queue while sleeping tasks run.
	fuzzSeed(1, 0, 0, workerpool.Block, 0, 0,
		fop(opBurst, 8+3), fop(opSubmitWait, int(kindSleep)), fop(opShutdown, 3), fop(opAdvance, 1),
		fop(opAdvance, 3)),
	// Stops race submissions.
	fuzzSeed(2, 0, 1, workerpool.Block, 2, 1,
		fop(opSubmit, int(kindBlock)), fop(opBurst, 2), fop(opTogether, 0), fop(opSubmitWait, int(kindQuick)),
		fop(opStopWait, 0), fop(opTogether, 0), fop(opSubmit, int(kindQuick)), fop(opStop, 0),
		fop(opReleaseAll, 0)),
	// Stop escalates a StopWait; Shutdown after both gets nothing.
	fuzzSeed(1, 0, 0, workerpool.Block, 0, 2,
		fop(opSubmit, int(kindBlock)), fop(opBurst, 2), fop(opStopWait, 0), fop(opStop, 0),
		fop(opShutdown, 1), fop(opRelease, 0)),
	// Stop ends a pause with tasks held; Pause after it returns at once.
	fuzzSeed(2, 2, 3, workerpool.Reject, 0, 0,
		fop(opPause, 0), fop(opBurst, 3), fop(opSubmitWait, int(kindQuick)), fop(opStop, 0), fop(opPause, 0),
		fop(opResize, 1)),
}

// fuzzSeed encodes a configuration (idle indexes fuzzIdle, final is as in
// fuzzConfig) and operations as FuzzPool input.
func fuzzSeed(max, min, bound int, overflow workerpool.Overflow, idle, final int, ops ...byte) []byte {
	head := []byte{byte(max-1) | byte(overflow)<<2, byte(min) | byte(bound)<<3 | byte(idle)<<5, byte(final)}
	return append(head, ops...)
}

// fop encodes one operation.
func fop(code, arg int) byte { return byte(code) | byte(arg)<<4 }
