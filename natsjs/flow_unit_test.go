package natsjs

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestTheFlowNeverHoldsMoreThanItsBoundNorCountsBelowZero drives a flow,
// without a server, through random interleavings of what the run does:
// pulls plain and carried, deliveries, runners starting, taking messages,
// acking, failing and leaving, statuses, probes and sweeps. After every
// step, every count is at least zero, credits at most the pool's size, and
// what the flow holds within its bound.
func TestTheFlowNeverHoldsMoreThanItsBoundNorCountsBelowZero(t *testing.T) {
	handed := 0 // messages handed to a lingering runner: the walk reached that path
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		f := newFlow()
		size, bound := 1+rng.IntN(8), 0
		if rng.IntN(2) == 0 {
			bound = 1 + rng.IntN(20)
		}
		f.setParams(size, bound, 10*time.Millisecond, 1+rng.IntN(50))
		f.minAhead = rng.IntN(4)
		now := time.Unix(0, 0)
		var (
			running   []*runner // active runners, each with or without a message
			lingering = make(map[*runner]bool)
			pulls     []uint64
			probes    []uint64
			clock     int64
		)
		for step := range 3000 {
			now = now.Add(time.Millisecond)
			clock += int64(time.Millisecond)
			switch rng.IntN(11) {
			case 0: // the puller
				if id, n, _ := f.takeForPull(now.Add(time.Second)); n > 0 {
					pulls = append(pulls, id)
				}
			case 1: // a message arrives
				f.delivered(&message{})
			case 2: // a pending runner starts
				if f.counts().pending > 0 {
					rn := newRunner()
					if f.start(rn) {
						running = append(running, rn)
					}
				} else if n := f.dueRunners(); n > 0 && rng.IntN(2) == 0 {
					f.unsubmitted(n) // the pool refused them
				}
			case 3, 4: // a runner takes its next message, or leaves
				if len(running) == 0 {
					continue
				}
				i := rng.IntN(len(running))
				rn := running[i]
				if rn.cur != nil {
					continue // it runs a handler
				}
				if lingering[rn] {
					// A message was handed to it, or the stop sent it away,
					// or its horizon passes.
					select {
					case m := <-rn.wake:
						delete(lingering, rn)
						if m == nil {
							running = append(running[:i], running[i+1:]...)
						} else {
							handed++
						}
					default:
						if rng.IntN(3) == 0 {
							delete(lingering, rn)
							if f.unlinger(rn) {
								running = append(running[:i], running[i+1:]...)
							} else if <-rn.wake == nil {
								running = append(running[:i], running[i+1:]...)
							}
						}
					}
					continue
				}
				m, linger := f.next(rn, rng.IntN(8) == 0, clock)
				switch {
				case linger:
					lingering[rn] = true
				case m == nil:
					running = append(running[:i], running[i+1:]...)
				}
			case 5: // a handler returns nil: its ack carries a pull, or not
				if rn := busy(running, rng); rn != nil {
					if id, n := f.carry(now.Add(time.Second)); n > 0 {
						pulls = append(pulls, id)
					} else {
						f.ackedPlain()
					}
					rn.cur = nil
				}
			case 6: // a handler fails: Nak'd
				if rn := busy(running, rng); rn != nil {
					f.released()
					rn.cur = nil
				}
			case 7: // a pull ends with a status
				if len(pulls) > 0 {
					i := rng.IntN(len(pulls))
					f.ended(pulls[i], rng.IntN(3)-1)
					pulls = append(pulls[:i], pulls[i+1:]...)
				}
			case 8: // the watcher probes acks, or sweeps lost pulls
				if id := f.probeAcked(now.Add(time.Second)); id != 0 {
					probes = append(probes, id)
				}
				if _, id := f.sweep(now.Add(-500*time.Millisecond), true, now.Add(time.Second)); id != 0 {
					probes = append(probes, id)
				}
			case 9: // a probe is answered, or expires
				if len(probes) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(probes))
					f.endProbe(probes[i])
					probes = append(probes[:i], probes[i+1:]...)
				} else {
					f.expireProbes(now, false)
				}
			case 10: // the pool grows or shrinks; late in the run, the stop
				size = 1 + rng.IntN(8)
				f.setParams(size, bound, 10*time.Millisecond, 1+rng.IntN(50))
				if step > 2500 && rng.IntN(4) == 0 {
					f.stop()
					f.handBack()
				}
			}
			c := f.counts()
			for name, v := range map[string]int{
				"queued": c.queued, "running": c.running, "owed": c.owed, "acked": c.acked,
				"probing": c.probing, "credits": c.credits, "active": c.active, "pending": c.pending,
			} {
				if v < 0 {
					t.Fatalf("seed %d step %d: %s = %d: %+v", seed, step, name, v, c)
				}
			}
			if c.credits > size {
				t.Fatalf("seed %d step %d: %d credits for a pool of %d", seed, step, c.credits, size)
			}
			if used := c.owed + c.queued + c.running + c.acked + c.probing; bound > 0 && used > bound {
				t.Fatalf("seed %d step %d: %d held against a bound of %d: %+v", seed, step, used, bound, c)
			}
		}
	}
	if handed == 0 {
		t.Error("no message was handed to a lingering runner: the walk missed that path")
	}
	t.Logf("%d messages handed to lingering runners", handed)
}

// busy returns a runner of running that runs a handler, or nil.
func busy(running []*runner, rng *rand.Rand) *runner {
	var out []*runner
	for _, rn := range running {
		if rn.cur != nil {
			out = append(out, rn)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out[rng.IntN(len(out))]
}
