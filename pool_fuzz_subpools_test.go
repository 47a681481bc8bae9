package workerpool_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/dispatchkit/workerpool"
)

// startV2 adds a v2 input's sub-pools, A and B, and its turn model, which
// predicts only with one worker and an unbounded queue.
func (m *fuzzModel) startV2() {
	for i, limit := range m.cfg.limits {
		m.subs[i] = m.p.Subpool(targetName(i+1), limit)
		m.subLimits[i] = limit
		m.targets[i+1].limit.Store(int64(limit))
	}
	m.tm = newTurnModel()
	switch {
	case m.cfg.max > 1:
		m.tm.stopPredicting("more than one worker")
	case m.cfg.bound > 0:
		m.tm.stopPredicting("a bounded queue")
	}
}

// The operations of a v2 input, which has sub-pools and keys: one byte
// each, as for v1 inputs, but an instruction set of its own. Targets are 0
// (the pool), 1 (A) and 2 (B). stepV2 carries out those marked v2; the
// others mean what the v1 operation of the same value does (step).
const (
	opV2Submit        = iota // v2: a task of kind arg%5 to target arg/5%3
	opV2SubmitWait           // v2: the same, by SubmitWait
	opV2SubmitKey            // v2: SubmitKey with key fuzzKeys[arg/3%2] to target arg%3, a task of kind quick, panic or sleep by arg/6%3
	opV2SubmitCtxDone        // v2: SubmitCtx with a cancelled context to target arg%3
	opV2SubmitCtx            // v2: a task of kind arg/3%5 to target arg%3, with a context that expires after 1+arg/8 s
	opV2Release              // v2: release the (arg % running)-th running task: a v2 task ends only when released (or, sleeping, when the clock moves on)
	opV2ReleaseAll           // v2: release every running task
	opV2Pause                // as opPause
	opV2Resume               // as opResume
	opV2ResizeSub            // v2: Resize sub-pool 1+arg%2 to the limit 1+arg/2%3
	opV2Advance              // as opAdvance
	opV2Stop                 // v2, with arg%4 1 or 2: that sub-pool's Stop; else as opStop
	opV2StopWait             // v2, with arg%4 1 or 2: that sub-pool's StopWait; else as opStopWait
	opV2Shutdown             // as opShutdown
	opV2Burst                // v2: 1+arg%4 quick tasks to target arg/4, or, for 3, to the pool with key fuzzKeys[0]
	opV2Together             // as opTogether
)

// stepV2 carries out the operations of a v2 input that v1 has not, and
// reports whether code was one.
func (m *fuzzModel) stepV2(code byte, arg int) bool {
	switch code {
	case opV2Submit, opV2SubmitWait:
		method := [...]submitMethod{viaSubmit, viaSubmitWait}[code]
		m.submitTask(&fuzzTask{method: method, kind: taskKind(arg % 5), target: arg / 5 % 3}, 0)
	case opV2SubmitKey:
		kind := [...]taskKind{kindQuick, kindPanic, kindSleep}[arg/6%3]
		m.submitTask(&fuzzTask{method: viaSubmitKey, kind: kind, target: arg % 3, keyed: true, key: fuzzKeys[arg/3%2]}, 0)
	case opV2SubmitCtxDone:
		m.submitTask(&fuzzTask{method: viaSubmitCtxDone, kind: kindQuick, target: arg % 3}, 0)
	case opV2SubmitCtx:
		m.submitTask(&fuzzTask{method: viaSubmitCtx, kind: taskKind(arg / 3 % 5), target: arg % 3}, time.Duration(1+arg/8)*time.Second)
	case opV2Burst:
		for range 1 + arg%4 {
			tk := &fuzzTask{method: viaSubmit, kind: kindQuick, target: arg / 4 % 3}
			if arg/4 == 3 {
				tk.method, tk.keyed, tk.key = viaSubmitKey, true, fuzzKeys[0]
			}
			m.submitTask(tk, 0)
			if !m.together {
				m.settle()
			}
		}
	case opV2Release, opV2ReleaseAll:
		m.releaseRunning(code == opV2Release, arg)
	case opV2ResizeSub:
		m.resizeSub(1+arg%2, 1+arg/2%3)
	case opV2Stop, opV2StopWait:
		if target := arg % 4; target == 1 || target == 2 {
			m.stopSub(int(code), target)
		} else {
			return false
		}
	default:
		return false
	}
	return true
}

// releaseRunning releases the (arg % running)-th running task (one), or
// every running task, and reports whether there was one.
func (m *fuzzModel) releaseRunning(one bool, arg int) bool {
	var open []*fuzzTask
	for _, tk := range m.tasks {
		if tk.gate != nil && !tk.opened && tk.runs.Load() > 0 && !tk.finished.Load() {
			open = append(open, tk)
		}
	}
	if len(open) == 0 {
		m.trace = append(m.trace, "release: nothing running")
		return false
	}
	if one {
		open = open[arg%len(open):][:1]
	}
	for _, tk := range open {
		m.trace = append(m.trace, fmt.Sprintf("release task %d", tk.id))
		tk.opened = true
		close(tk.gate)
		m.tm.released(tk)
	}
	return true
}

// accepts reports whether the turn model accepts tk, placing it if so. A
// model that no longer predicts accepts everything, claiming nothing.
func (m *fuzzModel) accepts(tk *fuzzTask) bool {
	switch {
	case m.tm.off != "":
		return true
	case tk.method == viaSubmitCtxDone: // refused either way; see checkSubmitResult
		return !m.tm.stopped && !m.tm.lanes[tk.target].closed
	}
	return m.tm.accept(tk)
}

// resizeSub resizes a sub-pool: until the next settle, its tasks may start
// under either limit.
func (m *fuzzModel) resizeSub(target, n int) {
	tg := &m.targets[target]
	tg.limit.Store(max(tg.limit.Load(), int64(n)))
	m.subResizes[target-1] = append(m.subResizes[target-1], n)
	m.tm.resize(target)
	s := m.subs[target-1]
	m.spawn(fmt.Sprintf("%s.Resize(%d)", s.Name(), n), func() bool { return true }, func() { s.Resize(n) })
}

// stopSub calls a sub-pool's Stop (opStop) or StopWait.
func (m *fuzzModel) stopSub(kind, target int) {
	st := &fuzzStop{kind: kind, target: target}
	m.stops = append(m.stops, st)
	if m.closedAt[target] == 0 {
		m.closedAt[target] = m.settles + 1
	}
	s := m.subs[target-1]
	desc, call := s.Name()+".StopWait", s.StopWait
	free := func() bool { return m.tasksQuiet(nil) && m.pausesQuiet(nil) }
	if kind == opV2Stop {
		m.subDropping = true
		desc, call = s.Name()+".Stop", func() { st.tasks = s.Stop() }
		free = func() bool { return m.tasksQuiet(nil) }
	}
	m.tm.stopLane(target, kind == opStop)
	st.op = m.spawn(desc, free, call)
}

// settleSubs applies the sub-pools' resizes once they have all returned.
func (m *fuzzModel) settleSubs() {
	for i, s := range m.subs {
		if len(m.subResizes[i]) > 0 {
			got := s.Status().MaxWorkers
			if !m.stopIssued && !slices.Contains(m.subResizes[i], got) {
				m.failf("sub-pool %s: limit %d after Resize to %v", s.Name(), got, m.subResizes[i])
			}
			m.subLimits[i], m.subResizes[i] = got, m.subResizes[i][:0]
		}
		m.targets[i+1].limit.Store(int64(m.subLimits[i]))
	}
}

// checkSubsAtRest checks each sub-pool's Status against the model while
// nothing moves.
func (m *fuzzModel) checkSubsAtRest() {
	for i, s := range m.subs {
		target := i + 1
		st, tg := s.Status(), &m.targets[target]
		inCallers := uint64(tg.callerRunning.Load())
		if st.Submitted != st.Completed+st.Abandoned+st.Canceled+uint64(st.Waiting)+uint64(st.Busy)+inCallers {
			m.failf("sub-pool %s at rest: Submitted != Completed + Abandoned + Canceled + Waiting + Busy (+ %d running in callers): %+v",
				s.Name(), inCallers, st)
		}
		if want := tg.running.Load(); int64(st.Busy) != want {
			m.failf("sub-pool %s: Busy = %d, but %d of its tasks run on workers", s.Name(), st.Busy, want)
		}
		if want := uint64(tg.finished.Load()); st.Completed != want {
			m.failf("sub-pool %s: Completed = %d, but %d of its tasks ended", s.Name(), st.Completed, want)
		}
		if want := uint64(tg.panicked.Load()); st.Panicked != want {
			m.failf("sub-pool %s: Panicked = %d, but %d of its tasks panicked", s.Name(), st.Panicked, want)
		}
		if st.MaxWorkers != m.subLimits[i] || st.Workers != 0 || st.Idle != 0 {
			m.failf("sub-pool %s: MaxWorkers = %d (want its limit %d), Workers = %d, Idle = %d (want 0)",
				s.Name(), st.MaxWorkers, m.subLimits[i], st.Workers, st.Idle)
		}
		var rejected, accepted uint64
		for _, tk := range m.tasks {
			if tk.target == target && m.resolvedOf(tk) {
				if tk.err == workerpool.ErrQueueFull {
					rejected++
				} else if tk.accepted() {
					accepted++
				}
			}
		}
		if st.Rejected != rejected || st.Submitted < accepted {
			m.failf("sub-pool %s: Rejected = %d, Submitted = %d; %d of its submissions got ErrQueueFull, %d were accepted",
				s.Name(), st.Rejected, st.Submitted, rejected, accepted)
		}
		m.subPeaks[i] = max(m.subPeaks[i], st.Waiting)
		if st.PeakWaiting < m.subPeaks[i] || m.cfg.bound > 0 && st.PeakWaiting > m.cfg.bound || uint64(st.PeakWaiting) > st.Submitted {
			m.failf("sub-pool %s: PeakWaiting = %d; it had %d waiting at rest, the bound is %d (0: none), %d were accepted",
				s.Name(), st.PeakWaiting, m.subPeaks[i], m.cfg.bound, st.Submitted)
		}
		stopped := m.anyStopReturned()
		for _, stop := range m.stops {
			stopped = stopped || stop.target == target && stop.op.done.Load()
		}
		if stopped && st.State != workerpool.Stopped {
			m.failf("sub-pool %s: State = %v after its or the pool's stop returned", s.Name(), st.State)
		}
	}
}

// sameQueue reports whether a and b were submitted to the same queue: the
// same target, and the same key or both unkeyed. Only within a queue does
// the pool promise acceptance order.
func sameQueue(a, b *fuzzTask) bool {
	return a.target == b.target && a.keyed == b.keyed && a.key == b.key
}

// The v2 operations marked "as" are the v1 ones of the same value.
var (
	_ [opV2Pause - opPause]struct{}
	_ [opPause - opV2Pause]struct{}
	_ [opV2Resume - opResume]struct{}
	_ [opResume - opV2Resume]struct{}
	_ [opV2Advance - opAdvance]struct{}
	_ [opAdvance - opV2Advance]struct{}
	_ [opV2Stop - opStop]struct{}
	_ [opStop - opV2Stop]struct{}
	_ [opV2StopWait - opStopWait]struct{}
	_ [opStopWait - opV2StopWait]struct{}
	_ [opV2Shutdown - opShutdown]struct{}
	_ [opShutdown - opV2Shutdown]struct{}
	_ [opV2Together - opTogether]struct{}
	_ [opTogether - opV2Together]struct{}
)
