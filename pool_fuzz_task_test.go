package workerpool_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/dispatchkit/workerpool"
)

// checkSubmitResult checks that a submission returned one of the results its
// documentation allows, at once as it returns.
func (m *fuzzModel) checkSubmitResult(tk *fuzzTask, desc string, err error, stopped bool) {
	bounded := m.cfg.bound > 0
	var pe *workerpool.PanicError
	switch {
	case tk.method == viaSubmitCtxDone:
		// A stopping pool says so first; otherwise the context is done.
		switch {
		case stopped && !errors.Is(err, workerpool.ErrStopped):
			m.goFail("%s with a cancelled context after a stop call returned %v, want ErrStopped", desc, err)
		case !errors.Is(err, context.Canceled) && !errors.Is(err, workerpool.ErrStopped):
			m.goFail("%s with a cancelled context returned %v, want context.Canceled", desc, err)
		}
		return
	case stopped && !errors.Is(err, workerpool.ErrStopped):
		m.goFail("%s after a stop call returned: got %v, want ErrStopped", desc, err)
	case err == nil, errors.Is(err, workerpool.ErrStopped):
	case err == workerpool.ErrQueueFull:
		if !bounded || tk.method != viaTrySubmit && m.cfg.overflow != workerpool.Reject {
			m.goFail("%s returned ErrQueueFull (bound %d, %v)", desc, m.cfg.bound, m.cfg.overflow)
		}
	case errors.As(err, &pe):
		if tk.method != viaSubmitWait || tk.kind != kindPanic {
			m.goFail("%s returned %v", desc, err)
		} else if v, ok := pe.Value.(fuzzPanic); !ok || v.task != tk {
			m.goFail("%s returned a PanicError with value %v, not its own", desc, pe.Value)
		}
	case errors.Is(err, context.DeadlineExceeded) && tk.method == viaSubmitCtx:
	default:
		m.goFail("%s returned %v", desc, err)
	}
	if err == nil && tk.kind == kindPanic && tk.method == viaSubmitWait {
		m.goFail("%s of a panicking task returned nil", desc)
	}
	runs := tk.runs.Load()
	if tk.method == viaSubmitWait && (err == nil || pe != nil) && (runs != 1 || !tk.finished.Load()) {
		m.goFail("%s returned %v before its task ran and ended (runs %d, ended %v)", desc, err, runs, tk.finished.Load())
	}
	if err != nil && pe == nil && runs != 0 {
		m.goFail("%s returned %v, but its task ran", desc, err)
	}
}

// submitCall calls submit. A task finds this frame on its stack when it runs
// in its submitter (CallerRuns), not on a worker.
//
//go:noinline
func submitCall(submit func() error) error { return submit() }

// onWorker reports whether the calling task runs on one of the pool's
// workers rather than in its submitter.
func onWorker() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "workerpool_test.submitCall") {
			return false
		}
		if !more {
			return true
		}
	}
}

// task returns tk's func, which records each start and end in the model.
func (m *fuzzModel) task(tk *fuzzTask) func() {
	return func() {
		if m.identifying.Load() {
			// The model calls a func that Stop returned, to learn its task.
			tk.returned++
			m.identified = append(m.identified, tk)
			return
		}
		if n := tk.runs.Add(1); n > 1 {
			m.goFail("task %d started %d times", tk.id, n)
		}
		if m.startedAfter.Load() {
			m.goFail("task %d started after a stop call returned", tk.id)
		}
		tk.started = time.Now()
		tg := &m.targets[tk.target]
		if onWorker() {
			tk.startSeq.Store(m.starts.Add(1))
			if n, limit := m.running.Add(1), m.limit.Load(); n > limit {
				m.goFail("task %d started on a worker with %d running, more than the maximum %d", tk.id, n, limit)
			}
			if m.held.Load() > 0 {
				m.goFail("task %d started on a worker while a Pause was in force", tk.id)
			}
			defer m.running.Add(-1)
			if n, limit := tg.running.Add(1), tg.limit.Load(); limit > 0 && n > limit {
				m.goFail("task %d of sub-pool %s started with %d of its tasks running, more than its limit %d", tk.id, targetName(tk.target), n, limit)
			}
			defer tg.running.Add(-1)
		} else {
			m.callerRunning.Add(1)
			defer m.callerRunning.Add(-1)
			tg.callerRunning.Add(1)
			defer tg.callerRunning.Add(-1)
		}
		if tk.keyed {
			kr := &m.keyRunning[tk.target][slices.Index(fuzzKeys[:], tk.key)]
			if n := kr.Add(1); n > 1 {
				m.goFail("task %d started while another task with key %s of %s ran", tk.id, tk.key, targetName(tk.target))
			}
			defer kr.Add(-1)
		}
		defer func() {
			tk.finished.Store(true)
			if tk.kind == kindPanic {
				m.panicked.Add(1)
				tg.panicked.Add(1)
			}
			m.finished.Add(1)
			tg.finished.Add(1)
		}()
		if m.cfg.v2 && tk.gate != nil {
			<-tk.gate // every v2 task but a sleeping one ends when released
		}
		switch tk.kind {
		case kindPanic:
			panic(fuzzPanic{tk})
		case kindGoexit:
			runtime.Goexit()
		case kindBlock:
			<-tk.gate
		case kindSleep:
			m.sleeping.Add(1)
			defer m.sleeping.Add(-1)
			time.Sleep(time.Second)
		}
	}
}

func (m *fuzzModel) panicHandler(pe *workerpool.PanicError) {
	m.handled.Add(1)
	v, ok := pe.Value.(fuzzPanic)
	switch {
	case !ok:
		m.goFail("the panic handler got %v, not a task's panic", pe.Value)
	case v.task.method == viaSubmitWait:
		m.goFail("the panic handler got the panic of SubmitWait task %d", v.task.id)
	}
}
