package workerpool

import (
	"context"
	"fmt"
)

// A Level submits to a pool's queue, or a sub-pool's, at a priority level:
// a [Submitter] that [Go], [Call], [Map], [MapSeq] and [Group] take as
// they take the pool. Make one with [Pool.Priority] or [Subpool.Priority].
//
// Within a queue, a waiting task of a higher level starts before every
// task of a lower one, and tasks of one level start in the order the pool
// accepted them. Queues still take turns: a sub-pool's urgent tasks go
// first within its turns, and never take another sub-pool's. So a queue's
// low levels wait for as long as higher ones keep coming: there is no
// aging. A key's tasks start in the order accepted whatever their levels,
// so a high task of a key waits for that key's earlier tasks, and for its
// running one. A task of a higher level that comes while the hand-off
// buffer holds lower tasks of its queue takes their place: the pool takes
// them back, and it waits only for the tasks that workers took meanwhile
// (usually none, at most one a worker).
type Level struct {
	s     *state
	lane  *lane // nil: the pool's own queue
	level int32
}

// Priority returns the pool's own queue at level, 0 or more; 0 is the
// level of [Pool.Submit]. It panics if level is negative or above
// [MaxLevel].
func (p *Pool) Priority(level int) *Level {
	v := &Level{s: p.s, level: checkLevel("Priority", level)}
	if p.s.cfg.timings {
		p.s.timings.levels.keep(v.level)
	}
	return v
}

// Priority returns the sub-pool's queue at level, as [Pool.Priority] does
// the pool's.
func (s *Subpool) Priority(level int) *Level {
	v := &Level{s: s.p.s, lane: s.lane, level: checkLevel("Subpool.Priority", level)}
	if v.s.cfg.timings {
		v.s.timings.levels.keep(v.level)
		s.lane.timings.levels.keep(v.level)
	}
	return v
}

// MaxLevel is the highest priority level.
const MaxLevel = 1<<31 - 1

func checkLevel(fn string, level int) int32 {
	if level < 0 || level > MaxLevel {
		panic(fmt.Sprintf("workerpool: %s(%d): the level must be 0 to MaxLevel", fn, level))
	}
	return int32(level)
}

func (v *Level) target() (*state, *lane) { return v.s, v.lane }
func (v *Level) priority() int32         { return v.level }

// Submit is [Pool.Submit] at the level.
func (v *Level) Submit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return v.s.submitTo(v.lane, nil, message{task: task{Fn: fn}, level: v.level}, v.s.cfg.overflow)
}

// SubmitContext is [Pool.SubmitContext] at the level. It panics if ctx is
// nil.
func (v *Level) SubmitContext(ctx context.Context, fn func()) error {
	mustContext("Level.SubmitContext", ctx)
	return v.s.submitContext(v.lane, v.level, ctx, fn)
}

// TrySubmit is [Pool.TrySubmit] at the level.
func (v *Level) TrySubmit(fn func()) error {
	if fn == nil {
		return ErrNilTask
	}
	return v.s.submitTo(v.lane, nil, message{task: task{Fn: fn}, level: v.level}, Reject)
}

// SubmitWait is [Pool.SubmitWait] at the level.
func (v *Level) SubmitWait(fn func()) error { return v.s.submitWait(v.lane, v.level, fn) }

// SubmitKey is [Pool.SubmitKey] at the level: the key's tasks still start
// one at a time, in the order submitted, whatever their levels.
func (v *Level) SubmitKey(key string, fn func()) error {
	return v.s.submitKey(v.lane, v.level, key, fn)
}

// Group returns a new group of tasks that run at the level, as
// [Pool.Group] does. It panics if ctx is nil.
func (v *Level) Group(ctx context.Context) *Group {
	mustContext("Level.Group", ctx)
	return newGroup(v, ctx).watch()
}
