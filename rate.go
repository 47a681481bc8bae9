package workerpool

import (
	"fmt"
	"math"
	"time"

	"github.com/dispatchkit/workerpool/internal/sched"
)

// A Limit is a rate of task starts, in starts per second, as in
// golang.org/x/time/rate: with a burst, a token bucket that holds at most
// burst tokens and gains Limit of them a second. [Inf] is no limit.
type Limit float64

// Inf is the rate with no limit: setting it removes a rate.
const Inf = Limit(math.MaxFloat64)

// Every returns the Limit of one start every interval; an interval of 0 or
// less is [Inf].
func Every(interval time.Duration) Limit {
	if interval <= 0 {
		return Inf
	}
	return 1 / Limit(interval.Seconds())
}

// SetRate paces the pool's tasks, every sub-pool's included: at most burst
// of them start at once, and the pool then starts no more than limit a
// second on average. A paced task goes only to a worker free to start it
// at once, never to the hand-off buffer ahead of the workers, and takes
// its token then, never inside the task: so tasks handed out at the
// rate's pace cannot pile up in the buffer and then start in a burst, and
// no pause, stop or turn ever takes back a task that holds a token. Inf
// removes the rate. It applies to every task not started when SetRate
// returns; the whole tokens the pool holds are kept, up to the new burst,
// and a full bucket, or a new rate's, starts with burst tokens.
//
// A task a rate holds back waits in its queue: it counts as Waiting (and
// as Paced, in [Status]), against the bound of [WithMaxWaiting], and the
// overflow policy applies to it. Its sub-pool keeps its turn and the
// others go meanwhile. [Pool.Pause] lets tokens gather, up to the burst.
// [Pool.Stop] drops the tasks a rate holds back, as any others;
// [Pool.StopWait] waits until the rate lets them all start, which can be
// long: [Pool.Shutdown] bounds the wait.
//
// Every rate that applies to a task must hold a token for it to start: the
// pool's, its sub-pool's ([Subpool.SetRate]) and its key's
// ([Pool.SetKeyRate]). A pool without a rate reads no clock for them.
//
// SetRate panics if limit is 0 or less, or if burst is less than 1 with a
// limit other than Inf.
func (p *Pool) SetRate(limit Limit, burst int) { p.s.setRate("SetRate", nil, false, limit, burst) }

// SetKeyRate paces each key of the pool's own queue (see [Pool.SubmitKey])
// as [Pool.SetRate] paces the pool: each key's tasks, which start one at a
// time, start at most limit a second, burst at once. A key keeps its
// bucket while it fills up after its last task, so waiting between tasks
// does not reset it. Inf removes the rate. It panics as SetRate does.
func (p *Pool) SetKeyRate(limit Limit, burst int) {
	p.s.setRate("SetKeyRate", nil, true, limit, burst)
}

// SetRate paces the sub-pool's tasks as [Pool.SetRate] paces the pool's:
// at most burst start at once, and limit a second on average. The pool's
// rate, if any, applies too. A sub-pool that a rate holds back keeps its
// turn, and the others go meanwhile. It panics as Pool.SetRate does.
func (s *Subpool) SetRate(limit Limit, burst int) {
	s.p.s.setRate("Subpool.SetRate", s.lane, false, limit, burst)
}

// SetKeyRate paces each key of the sub-pool (see [Subpool.SubmitKey]), as
// [Pool.SetKeyRate] does the pool's. It panics as Pool.SetRate does.
func (s *Subpool) SetKeyRate(limit Limit, burst int) {
	s.p.s.setRate("Subpool.SetKeyRate", s.lane, true, limit, burst)
}

// setRate checks a rate and sends it to the loop, for the pool (l nil) or
// the sub-pool of lane l, or their keys, and waits for it to take effect.
func (s *state) setRate(fn string, l *lane, keys bool, limit Limit, burst int) {
	r := &request{kind: rateRequest, lane: l, keys: keys, rate: rateOf(fn, limit, burst), done: make(chan struct{})}
	if s.request(r) {
		<-r.done
	}
}

// rateOf returns the scheduler's rate for limit and burst, or panics,
// naming fn, if there can be none.
func rateOf(fn string, limit Limit, burst int) sched.Rate {
	switch {
	case limit == Inf:
		return sched.Rate{}
	case !(limit > 0):
		panic(fmt.Sprintf("workerpool: %s(%v, %d): the limit must be above 0 (Inf for none)", fn, float64(limit), burst))
	case burst < 1:
		panic(fmt.Sprintf("workerpool: %s(%v, %d): the burst must be at least 1", fn, float64(limit), burst))
	}
	interval := math.Round(float64(time.Second) / float64(limit))
	switch {
	case interval < 1:
		return sched.Rate{} // more than a start a nanosecond: no limit
	case interval > math.MaxInt64/4:
		interval = math.MaxInt64 / 4
	}
	return sched.Rate{Interval: int64(interval), Burst: int64(burst)}
}
