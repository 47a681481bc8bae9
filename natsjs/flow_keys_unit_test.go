package natsjs

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestTheFlowOfKeyedTasksNeverHoldsMoreThanItsBoundNorCountsATaskTwice
// drives a flow with key order, without a server or a pool, through random
// interleavings of what the run does: pulls, deliveries, submissions (some
// refused by a full pool), tasks starting (or finding their message taken
// back), handlers acking or failing, statuses, and, late, the stop. After
// every step every count is at least zero, what the flow holds within its
// bound, a message the pool has either waiting or running in the flow or
// handed back, never both, and the keys' counts those of the messages in
// the pool.
func TestTheFlowOfKeyedTasksNeverHoldsMoreThanItsBoundNorCountsATaskTwice(t *testing.T) {
	started := 0 // tasks that ran their message: the walk reached that path
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e9955bd1e995))
		f := newFlow()
		size, bound := 1+rng.IntN(8), 0
		if rng.IntN(2) == 0 {
			bound = 1 + rng.IntN(30)
		}
		f.setParams(size, bound, 10*time.Millisecond, 1+rng.IntN(50))
		f.setKeyed()
		f.minAhead = rng.IntN(4)
		now := time.Unix(0, 0)
		var (
			pulls   []uint64
			inPool  []*message // submitted, their tasks not run yet
			running []*message // their tasks started
			stopped bool
			handed  []*message
		)
		for step := range 2000 {
			now = now.Add(time.Millisecond)
			switch rng.IntN(8) {
			case 0: // the puller
				if p, _ := f.takeForPull(now.Add(time.Second)); p.n > 0 {
					pulls = append(pulls, p.id)
				}
			case 1: // a message arrives
				f.delivered(&message{size: 1}, false)
			case 2: // the puller submits, as the pool accepts or refuses
				if m := f.nextToSubmit(); m != nil {
					if !f.submitting(m, string(rune('a'+rng.IntN(3)))) {
						t.Fatalf("seed %d step %d: the oldest message to submit was taken", seed, step)
					}
					if rng.IntN(5) == 0 {
						f.unsubmit(m) // the pool's queue is full
						continue
					}
					inPool = append(inPool, m)
				}
			case 3: // the pool starts a task
				if len(inPool) > 0 {
					i := rng.IntN(len(inPool))
					m := inPool[i]
					inPool = slices.Delete(inPool, i, i+1)
					if f.startKeyed(m) {
						running = append(running, m)
						started++
					}
				}
			case 4: // a handler returns: acked, with a pull or not, or Nak'd
				if len(running) > 0 {
					i := rng.IntN(len(running))
					m := running[i]
					running = slices.Delete(running, i, i+1)
					switch rng.IntN(3) {
					case 0:
						if p := f.carry(m, now.Add(time.Second)); p.n > 0 {
							pulls = append(pulls, p.id)
						} else {
							f.ackedPlain(m)
						}
					case 1:
						f.ackedPlain(m)
					default:
						f.released(m)
					}
				}
			case 5: // a pull ends with a status
				if len(pulls) > 0 {
					i := rng.IntN(len(pulls))
					f.ended(pulls[i], rng.IntN(3)-1)
					pulls = slices.Delete(pulls, i, i+1)
				}
			case 6: // the watcher probes the acks
				if id := f.probeAcked(now.Add(time.Second)); id != 0 {
					f.endProbe(id)
				}
			case 7: // late in the walk, the stop
				if step > 1500 && !stopped && rng.IntN(20) == 0 {
					stopped = true
					f.stop()
					handed = f.handBack()
				}
			}
			c := f.counts()
			for name, v := range map[string]int{
				"queued": c.queued, "waiting": c.waiting, "running": c.running, "owed": c.owed,
				"acked": c.acked, "probing": c.probing, "bytes": c.bytes,
			} {
				if v < 0 {
					t.Fatalf("seed %d step %d: %s = %d: %+v", seed, step, name, v, c)
				}
			}
			if used := c.owed + c.queued + c.waiting + c.running + c.acked + c.probing; bound > 0 && used > bound {
				t.Fatalf("seed %d step %d: %d held against a bound of %d: %+v", seed, step, used, bound, c)
			}
			f.mu.Lock()
			inKeys := 0
			for _, n := range f.keys {
				inKeys += n
			}
			consistent := len(f.out) == f.waiting+len(running) && inKeys == len(f.out) && f.running == len(running)
			f.mu.Unlock()
			if !consistent {
				t.Fatalf("seed %d step %d: %d in the pool's hands, %d waiting, %d running, %d by key: %+v",
					seed, step, len(f.out), c.waiting, len(running), inKeys, c)
			}
			// A message in the pool is running, waiting, or was handed back
			// by the stop, never two of them.
			for _, m := range inPool {
				f.mu.Lock()
				_, out := f.out[m]
				f.mu.Unlock()
				if out == slices.Contains(handed, m) {
					t.Fatalf("seed %d step %d: a message in the pool is in the flow %v and handed back %v", seed, step, out, !out)
				}
			}
		}
	}
	if started == 0 {
		t.Error("no task ran its message: the walk missed that path")
	}
}
