package workerpool_test

import (
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

	// v2. Fair turns: the pool and two sub-pools, each flooded, take turns
	// on one worker.
	fuzzSeedV2(1, 0, workerpool.Block, 0, 1, 1, 1,
		v2Submit(0, kindBlock), v2Burst(1, 4), v2Burst(2, 4), v2Burst(0, 3),
		v2Release(), v2Release(), v2Release(), v2Release(), v2Release(), v2Release()),
	// A sub-pool at its limit is skipped; raising it lets its tasks go at
	// once.
	fuzzSeedV2(1, 0, workerpool.Block, 0, 1, 1, 2,
		v2Submit(1, kindBlock), v2Burst(1, 3), v2Burst(2, 2), v2Resize(1, 3), v2Release(), v2Release(),
		v2Resize(2, 1), v2Release()),
	// Keys: a busy key holds its tasks aside; other keys and unkeyed tasks
	// go by.
	fuzzSeedV2(1, 0, workerpool.Block, 1, 2, 1, 1,
		v2Key(0, 0, 0), v2Key(0, 0, 1), v2Key(0, 1, 0), v2Submit(0, kindQuick), v2Key(0, 0, 2), v2Burst(3, 3),
		v2Key(1, 0, 0), v2Key(1, 0, 0), v2Key(2, 1, 1), v2Release(), v2Release(), fop(opV2Advance, 2), v2Release()),
	// A pause takes back the task handed out ahead, which keeps its turn.
	fuzzSeedV2(1, 0, workerpool.Block, 0, 1, 2, 1,
		v2Submit(1, kindBlock), v2Submit(1, kindQuick), v2Submit(2, kindQuick), v2Key(0, 1, 0),
		fop(opV2Pause, 0), v2Release(), fop(opV2Pause, 0), fop(opV2Resume, 0), v2Submit(0, kindQuick), fop(opV2Resume, 0),
		v2Release(), v2Release()),
	// A sub-pool's Stop drops its queue, and its StopWait runs it; the pool
	// and the other sub-pool go on.
	fuzzSeedV2(1, 0, workerpool.Block, 0, 2, 1, 1,
		v2Submit(2, kindBlock), v2Burst(1, 3), v2Key(1, 1, 0), v2Wait(1, kindQuick), v2Burst(2, 2), v2Burst(0, 2),
		v2Stop(1), v2Submit(1, kindQuick), v2StopWait(2), v2Release(), v2Release(), v2Submit(2, kindQuick)),
	// Sleeping tasks end on the clock, one after another.
	fuzzSeedV2(1, 0, workerpool.Block, 1, 1, 1, 1,
		v2Submit(1, kindSleep), v2Submit(2, kindSleep), v2Submit(0, kindSleep), v2Key(0, 0, 2), v2Submit(1, kindSleep),
		fop(opV2Advance, 1), fop(opV2Advance, 2), fop(opV2Advance, 4)),
	// Panics and Goexits in sub-pool and keyed tasks.
	fuzzSeedV2(1, 0, workerpool.Block, 2, 1, 1, 1,
		v2Submit(1, kindPanic), v2Wait(1, kindPanic), v2Submit(2, kindGoexit), v2Wait(2, kindGoexit), v2Key(1, 0, 1),
		v2Key(1, 0, 1), v2ReleaseAll(), v2ReleaseAll(), v2ReleaseAll(), v2ReleaseAll()),
	// More workers, a bound and CallerRuns: the limits and keys hold.
	fuzzSeedV2(3, 2, workerpool.CallerRuns, 0, 1, 1, 2,
		v2Burst(1, 4), v2Burst(2, 4), v2Burst(3, 4), v2Key(1, 0, 0), v2Wait(2, kindQuick), v2ReleaseAll(),
		v2ReleaseAll(), v2Stop(2), v2ReleaseAll()),
	// A bounded queue that rejects, with sub-pools and keys.
	fuzzSeedV2(2, 3, workerpool.Reject, 0, 0, 2, 1,
		v2Burst(1, 4), v2Burst(3, 4), v2Key(2, 0, 0), v2Wait(0, kindQuick), v2ReleaseAll(),
		v2StopWait(1), v2ReleaseAll()),
}

// fuzzSeedV2 encodes a v2 configuration, with sub-pool limits la and lb (see
// decodeFuzzConfig), and operations as FuzzPool input.
func fuzzSeedV2(max, bound int, overflow workerpool.Overflow, idle, final, la, lb int, ops ...byte) []byte {
	b0 := map[int]byte{1: 0, 2: 2, 3: 3}[max] | byte(overflow)<<2
	b1 := map[int]byte{0: 0, 2: 2, 3: 3}[bound]<<3 | byte(idle)<<5
	b2 := byte(final) | 4 | byte(la-1)<<3 | byte(lb-1)<<4
	return append([]byte{b0, b1, b2}, ops...)
}

// The encodings of v2 operations (see fuzzModel.stepV2); target 0 is the
// pool, 1 and 2 the sub-pools; key is an index in fuzzKeys, and keyKind 0,
// 1 or 2 a quick, panicking or sleeping task.
func v2Submit(target int, kind taskKind) byte { return fop(opV2Submit, target*5+int(kind)) }
func v2Wait(target int, kind taskKind) byte   { return fop(opV2SubmitWait, target*5+int(kind)) }
func v2Key(target, key, keyKind int) byte     { return fop(opV2SubmitKey, target+3*key+6*keyKind) }
func v2Burst(target, n int) byte              { return fop(opV2Burst, target*4+n-1) } // target 3: keyed, on the pool
func v2Release() byte                         { return fop(opV2Release, 0) }
func v2ReleaseAll() byte                      { return fop(opV2ReleaseAll, 0) }
func v2Resize(sub, n int) byte                { return fop(opV2ResizeSub, sub-1+2*(n-1)) }
func v2Stop(sub int) byte                     { return fop(opV2Stop, sub) }
func v2StopWait(sub int) byte                 { return fop(opV2StopWait, sub) }

// fuzzSeed encodes a configuration (idle indexes fuzzIdle, final is as in
// fuzzConfig) and operations as FuzzPool input.
func fuzzSeed(max, min, bound int, overflow workerpool.Overflow, idle, final int, ops ...byte) []byte {
	head := []byte{byte(max-1) | byte(overflow)<<2, byte(min) | byte(bound)<<3 | byte(idle)<<5, byte(final)}
	return append(head, ops...)
}

// fop encodes one operation.
func fop(code, arg int) byte { return byte(code) | byte(arg)<<4 }
