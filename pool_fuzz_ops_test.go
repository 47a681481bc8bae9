package workerpool_test

import (
	"context"
	"fmt"
	"testing/synctest"
	"time"

	"github.com/dispatchkit/workerpool"
)

func (m *fuzzModel) step(code byte, arg int) {
	m.stopSettled = m.anyStopReturned()
	if m.cfg.v2 {
		if m.together {
			m.tm.stopPredicting("two operations ran together")
		}
		if m.stepV2(code, arg) {
			return
		}
	}
	switch code {
	case opSubmit, opSubmitWait, opTrySubmit, opSubmitCtxDone, opSubmitCtx:
		method := [...]submitMethod{viaSubmit, viaSubmitWait, viaTrySubmit, viaSubmitCtxDone, viaSubmitCtx}[code]
		m.submit(method, taskKind(arg%5), time.Duration(1+arg/5)*time.Second)
	case opBurst:
		for range 1 + arg%4 {
			m.submit(viaSubmit, fuzzBurstKinds[arg/4], 0)
			if !m.together {
				m.settle()
			}
		}
	case opRelease, opReleaseAll:
		var open []*fuzzTask
		for _, tk := range m.tasks {
			if tk.gate != nil && !tk.opened {
				open = append(open, tk)
			}
		}
		if len(open) == 0 {
			m.trace = append(m.trace, "release: nothing blocked")
			return
		}
		if code == opRelease {
			open = open[arg%len(open):][:1]
		}
		for _, tk := range open {
			m.trace = append(m.trace, fmt.Sprintf("release task %d", tk.id))
			tk.opened = true
			close(tk.gate)
		}
	case opPause:
		m.pause()
	case opResume:
		m.mu.Lock()
		var pz *fuzzPause
		for _, p := range m.pauses {
			if !p.cancelled {
				pz = p
				break
			}
		}
		if pz != nil {
			pz.cancelled = true
			if pz.held {
				pz.held = false
				m.held.Add(-1)
			}
		}
		m.mu.Unlock()
		if pz == nil {
			m.trace = append(m.trace, "resume: no pause")
			return
		}
		m.trace = append(m.trace, "resume")
		pz.cancel()
		if m.cfg.v2 {
			m.tm.resume()
		}
	case opResize:
		lo := max(1, m.cfg.min)
		n := lo + arg%(5-lo)
		// Until the next settle, tasks may start under either maximum.
		m.limit.Store(max(m.limit.Load(), int64(n)))
		m.maxSize = max(m.maxSize, n)
		m.resizes = append(m.resizes, n)
		always := func() bool { return true }
		m.spawn(fmt.Sprintf("Resize(%d)", n), always, func() { m.p.Resize(n) })
	case opAdvance:
		m.advance(fuzzAdvance[arg%len(fuzzAdvance)])
	case opStop, opStopWait, opShutdown:
		m.stop(int(code), code == opShutdown && arg%2 == 1, fuzzDeadline[arg/2%4])
	case opTogether:
		m.trace = append(m.trace, "together:")
		m.together = true
	}
}

// submit submits one new task by method to the pool, in its own goroutine.
func (m *fuzzModel) submit(method submitMethod, kind taskKind, timeout time.Duration) {
	m.submitTask(&fuzzTask{kind: kind, method: method}, timeout)
}

// submitTask submits tk, of which kind, method and in v2 target and key are
// set, in its own goroutine.
func (m *fuzzModel) submitTask(tk *fuzzTask, timeout time.Duration) {
	kind, method := tk.kind, tk.method
	// A stop call returned, or, in v2, the target sub-pool's Stop or
	// StopWait was called before the last settle.
	stopped := m.stopSettled || m.closedAt[tk.target] != 0 && m.closedAt[tk.target] <= m.settles
	bounded := m.cfg.bound > 0
	blocking := kind == kindBlock || kind == kindSleep || m.cfg.v2

	tk.id, tk.launched = len(m.tasks), m.settles
	// A call must return once nothing can hold it up: no pause and no
	// other task that blocks or sleeps (then the queue drains and has
	// room), or at once if it is a kind of call that never waits.
	never := stopped || method == viaTrySubmit || method == viaSubmitCtxDone
	other := tk // only other tasks hold up a fire-and-forget submission
	switch method {
	case viaSubmitWait:
		other = nil
	case viaSubmit, viaSubmitCtx:
		never = never || !bounded || m.cfg.overflow == workerpool.Reject ||
			m.cfg.overflow == workerpool.CallerRuns && !blocking
		if bounded && m.cfg.overflow == workerpool.CallerRuns {
			other = nil // it may run in the caller
		}
	case viaSubmitKey:
		// Never in the caller: CallerRuns waits for room as Block does.
		never = never || !bounded || m.cfg.overflow == workerpool.Reject
	}
	free := func() bool { return never || m.tasksQuiet(other) && m.pausesQuiet(nil) }

	if kind == kindBlock || m.cfg.v2 && kind != kindSleep {
		tk.gate = make(chan struct{})
	}
	m.tasks = append(m.tasks, tk)
	m.taskOp = append(m.taskOp, len(m.ops)) // the spawn below
	task := m.task(tk)
	var to workerpool.Submitter = m.p
	if tk.target > 0 {
		to = m.subs[tk.target-1]
	}
	if m.cfg.v2 && !m.accepts(tk) {
		// The model says it is refused: it must be.
		stopped = true
	}

	desc := fmt.Sprintf("%v(task %d, %v)", method, tk.id, kind)
	if m.cfg.v2 {
		desc = fmt.Sprintf("%s.%v(task %d, %v", targetName(tk.target), method, tk.id, kind)
		if tk.keyed {
			desc += ", key " + tk.key
		}
		desc += ")"
	}
	m.spawn(desc, free, func() {
		normal := false
		defer func() {
			tk.goexited = !normal
			tk.resolved = true
		}()
		var err error
		switch method {
		case viaSubmit:
			err = submitCall(func() error { return to.Submit(task) })
		case viaSubmitWait:
			err = submitCall(func() error { return to.SubmitWait(task) })
		case viaTrySubmit:
			err = submitCall(func() error { return to.TrySubmit(task) })
		case viaSubmitCtxDone:
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err = submitCall(func() error { return to.SubmitContext(ctx, task) })
		case viaSubmitCtx:
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err = submitCall(func() error { return to.SubmitContext(ctx, task) })
		case viaSubmitKey:
			err = submitCall(func() error { return to.SubmitKey(tk.key, task) })
		}
		normal = true
		tk.err = err
		m.checkSubmitResult(tk, desc, err, stopped)
	})
}

// tasksQuiet reports whether no task but skip that blocks or sleeps may
// still run.
func (m *fuzzModel) tasksQuiet(skip *fuzzTask) bool {
	for _, tk := range m.tasks {
		if tk == skip {
			continue
		}
		if (tk.gate != nil && !tk.opened || tk.kind == kindSleep) &&
			!tk.finished.Load() && !(m.resolvedOf(tk) && !tk.accepted()) {
			return false
		}
	}
	return true
}

// pausesQuiet reports whether no pause but skip is in force or may take
// hold. (Pauses launched together may take hold in either order.)
func (m *fuzzModel) pausesQuiet(skip *fuzzPause) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopIssued {
		return true
	}
	for _, pz := range m.pauses {
		if pz != skip && !pz.cancelled {
			return false
		}
	}
	return true
}

// resolvedOf reports whether tk's submission has returned, which makes its
// outcome fields safe to read (op.done is stored after them).
func (m *fuzzModel) resolvedOf(tk *fuzzTask) bool {
	return m.ops[m.taskOp[tk.id]].done.Load()
}

func (m *fuzzModel) pause() {
	if m.cfg.v2 {
		m.tm.pause()
	}
	ctx, cancel := context.WithCancel(context.Background())
	pz := &fuzzPause{cancel: cancel}
	m.mu.Lock()
	m.pauses = append(m.pauses, pz)
	m.mu.Unlock()
	// Pause waits for the running tasks and for the pauses before it.
	stopped := m.stopSettled
	free := func() bool { return stopped || m.tasksQuiet(nil) && m.pausesQuiet(pz) }
	m.spawn("Pause", free, func() {
		m.p.Pause(ctx)
		m.mu.Lock()
		defer m.mu.Unlock()
		if pz.cancelled || m.stopIssued {
			return // the pause ended, or never took hold
		}
		if n := m.running.Load(); n != 0 {
			m.goFail("Pause returned with %d tasks running on workers", n)
		}
		pz.held = true
		m.held.Add(1)
	})
}

// advance moves the fake clock on by d and checks idle reaping.
func (m *fuzzModel) advance(d time.Duration) {
	m.trace = append(m.trace, fmt.Sprintf("advance %v", d))
	timeout := m.cfg.idle
	if timeout == 0 {
		timeout = workerpool.DefaultIdleTimeout
	}
	// Only when nothing else happens meanwhile can the model say exactly
	// how many workers remain. (The clock moves only once every goroutine
	// is blocked, so waiting for that first changes nothing.)
	synctest.Wait()
	reapCheck := m.cfg.idle >= 0 && d > 2*timeout && m.sleeping.Load() == 0 && !m.stopIssued
	time.Sleep(d)
	if m.cfg.v2 {
		m.tm.advance(time.Now())
	}
	m.settle()
	if !reapCheck {
		return
	}
	s := m.p.Status()
	if want := max(m.cfg.min, s.Busy); s.Workers != want {
		m.failf("%v after more than two idle timeouts (%v), %d workers remain with %d busy; want %d", d, timeout, s.Workers, s.Busy, want)
	}
}

func (m *fuzzModel) stop(kind int, deadline bool, d time.Duration) {
	m.mu.Lock()
	m.stopIssued = true
	for _, pz := range m.pauses {
		if pz.held {
			pz.held = false
			m.held.Add(-1)
		}
	}
	m.mu.Unlock()
	st := &fuzzStop{kind: kind, deadline: deadline, at: time.Now().Add(d)}
	m.stops = append(m.stops, st)
	if m.cfg.v2 {
		if deadline {
			m.tm.stopPredicting("Shutdown with a deadline")
		}
		m.tm.stopPool(kind == opStop)
	}
	var desc string
	var call func()
	switch kind {
	case opStop:
		desc, call = "Stop", func() { st.tasks = m.p.Stop() }
	case opStopWait:
		desc, call = "StopWait", m.p.StopWait
	case opShutdown:
		desc = "Shutdown"
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if deadline {
			desc = fmt.Sprintf("Shutdown(deadline %v)", d)
			ctx, cancel = context.WithTimeout(ctx, d)
		}
		call = func() {
			defer cancel()
			st.tasks, st.err = m.p.Shutdown(ctx)
		}
	}
	// A stop waits only for the tasks.
	st.op = m.spawn(desc, func() bool { return m.tasksQuiet(nil) }, call)
}

// anyStopReturned reports whether a stop call of the pool (not of a
// sub-pool) has returned.
func (m *fuzzModel) anyStopReturned() bool {
	for _, st := range m.stops {
		if st.target == 0 && st.op.done.Load() {
			return true
		}
	}
	return false
}
