package natsjs

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestTheFlowNeverHoldsMoreThanItsBoundNorCountsBelowZero drives a flow,
// without a server, through random interleavings of what the run does:
// pulls plain and carried, deliveries (as the server makes them, within
// each pull's count and max_bytes, and some late, that no pull owed),
// runners starting, taking messages, acking, failing (for good, their
// messages held while their dead letters are published; or cut by the
// stop, their messages put back in the queue) and leaving,
// statuses, probes and sweeps, and redeliveries of held messages, which
// the messages in charge adopt. After every step, every count is at least
// zero, credits at most the pool's size, what the flow holds within its
// bound, what its messages weigh what it counts, what the pulls may still
// bring no more than it counts, and the two within its byte bound but for
// one message alone.
func TestTheFlowNeverHoldsMoreThanItsBoundNorCountsBelowZero(t *testing.T) {
	handed := 0   // messages handed to a lingering runner: the walk reached that path
	tooLarge := 0 // pulls the server ended because the next message was too large
	alone := 0    // steps at which one message larger than the byte bound was held
	requeued := 0 // cut handlers' messages put back in the queue at a stop
	held := 0     // messages held while their dead letters were published
	adopted := 0  // redeliveries of held messages
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		f := newFlow()
		size, bound := 1+rng.IntN(8), 0
		if rng.IntN(2) == 0 {
			bound = 1 + rng.IntN(20)
		}
		f.setParams(size, bound, 10*time.Millisecond, 1+rng.IntN(50))
		maxBytes, maxSize := 0, 1+rng.IntN(400)
		switch rng.IntN(3) {
		case 1:
			maxBytes = 1 + rng.IntN(2000) // a few messages
		case 2:
			maxBytes = 1 + rng.IntN(1<<20) // pulls ask for what their messages should weigh
		}
		reqLimit := 0 // the consumer's MaxRequestMaxBytes
		if rng.IntN(3) == 0 {
			reqLimit = 1 + rng.IntN(600)
		}
		f.setByteBound(maxBytes, reqLimit)
		f.minAhead = rng.IntN(4)
		now := time.Unix(0, 0)
		var (
			running   []*runner // active runners, each with or without a message
			lingering = make(map[*runner]bool)
			pulls     []*livePull // the server's view of the pulls it may serve
			probes    []uint64
			clock     int64
			finishing []*message // held while their dead letters are published
			stopped   bool
			seq       uint64 // the last message's stream sequence
		)
		deliver := func(m *message, again bool) {
			before := f.counts()
			taken, runners := f.delivered(m, again)
			if !again {
				return
			}
			after := f.counts()
			if !taken || runners != 0 || after.queued != before.queued || after.running != before.running {
				t.Fatalf("seed %d: a redelivery of a held message was not adopted: %+v, then %+v", seed, before, after)
			}
			adopted++
		}
		newPull := func(p pull) {
			if reqLimit > 0 && p.maxBytes > reqLimit {
				t.Fatalf("seed %d: a pull of %d bytes against a MaxRequestMaxBytes of %d", seed, p.maxBytes, reqLimit)
			}
			if p.n > 0 {
				pulls = append(pulls, &livePull{pull: p, left: p.maxBytes, deadline: now.Add(time.Second)})
			}
		}
		for step := range 3000 {
			now = now.Add(time.Millisecond)
			clock += int64(time.Millisecond)
			switch rng.IntN(11) {
			case 0: // the puller
				p, _ := f.takeForPull(now.Add(time.Second))
				newPull(p)
			case 1: // a pull brings a message, as the server would; or a late
				// one, of a pull given up on: without a byte bound, at
				// any time; with one, when no pull is live, since the
				// server serves no pull past the deadline the flow gives
				// it, and the flow counts a message as owed while any is
				seq++
				m, again := &message{size: 1 + rng.IntN(maxSize), seq: seq}, false
				if h := heldOne(running, finishing, rng); h != nil && rng.IntN(4) == 0 {
					// The server delivers a held message again: its
					// progress messages came too late.
					m, again = &message{size: h.size, seq: h.seq}, true
				}
				if len(pulls) == 0 || maxBytes == 0 && rng.IntN(10) == 0 {
					deliver(m, again)
					continue
				}
				i := rng.IntN(len(pulls))
				p := pulls[i]
				if p.maxBytes > 0 && m.size > p.left {
					// The server ends the pull: the message does not fit.
					f.tooLarge(p.id, p.n, p.left)
					tooLarge++
					pulls = append(pulls[:i], pulls[i+1:]...)
					continue
				}
				deliver(m, again)
				p.n--
				p.left -= m.size
				if p.n == 0 || p.maxBytes > 0 && p.left == 0 {
					// Served. With bytes to spare, the server says so.
					if p.maxBytes > 0 && p.left > 0 {
						f.ended(p.id, 0)
					}
					pulls = append(pulls[:i], pulls[i+1:]...)
				}
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
					if p := f.carry(rn.cur, now.Add(time.Second)); p.n > 0 {
						newPull(p)
					} else {
						f.ackedPlain(rn.cur)
					}
					rn.cur = nil
				}
			case 6: // a handler fails: Nak'd; or for good, its dead letter
				// published without the worker; or, once the stop cut it,
				// back to the queue until the pulls end
				if rn := busy(running, rng); rn != nil {
					switch {
					case stopped && rng.IntN(2) == 0:
						if f.requeue(rn.cur) {
							requeued++
						} else {
							f.released(rn.cur) // handed back at once
						}
					case rng.IntN(3) == 0:
						f.hold(rn.cur)
						finishing = append(finishing, rn.cur)
						held++
					default:
						f.released(rn.cur)
					}
					rn.cur = nil
				} else if len(finishing) > 0 {
					// A dead letter was published, or given up on.
					i := rng.IntN(len(finishing))
					f.unhold(finishing[i])
					finishing = append(finishing[:i], finishing[i+1:]...)
				}
			case 7: // a pull ends with a status: what it left, or nothing said
				if len(pulls) > 0 {
					i := rng.IntN(len(pulls))
					if p := pulls[i]; rng.IntN(2) == 0 {
						f.ended(p.id, p.n)
					} else {
						f.ended(p.id, -1)
					}
					pulls = append(pulls[:i], pulls[i+1:]...)
				}
			case 8: // the watcher probes acks, or sweeps lost pulls
				if id := f.probeAcked(now.Add(time.Second)); id != 0 {
					probes = append(probes, id)
				}
				swept := now.Add(-500 * time.Millisecond)
				if _, id := f.sweep(swept, true, now.Add(time.Second)); id != 0 {
					probes = append(probes, id)
				}
				// The server serves no pull past its deadline, which is
				// after the pull's own expiry.
				pulls = slices.DeleteFunc(pulls, func(p *livePull) bool { return swept.After(p.deadline) })
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
					stopped = true
					if rng.IntN(2) == 0 {
						f.handBack()
					}
				}
			}
			c := f.counts()
			for name, v := range map[string]int{
				"queued": c.queued, "running": c.running, "owed": c.owed, "acked": c.acked,
				"probing": c.probing, "finishing": c.finishing, "credits": c.credits, "active": c.active, "pending": c.pending,
				"bytes": c.bytes, "owed bytes": c.owedBytes,
			} {
				if v < 0 {
					t.Fatalf("seed %d step %d: %s = %d: %+v", seed, step, name, v, c)
				}
			}
			if c.credits > size {
				t.Fatalf("seed %d step %d: %d credits for a pool of %d", seed, step, c.credits, size)
			}
			if c.finishing != len(finishing) {
				t.Fatalf("seed %d step %d: %d finishing, the flow counts %d: %+v", seed, step, len(finishing), c.finishing, c)
			}
			if used := c.owed + c.queued + c.running + c.finishing + c.acked + c.probing; bound > 0 && used > bound {
				t.Fatalf("seed %d step %d: %d held against a bound of %d: %+v", seed, step, used, bound, c)
			}
			if weight := heldBytes(f, running, finishing); weight != c.bytes {
				t.Fatalf("seed %d step %d: the held messages weigh %d, the flow counts %d: %+v", seed, step, weight, c.bytes, c)
			}
			// What the server may still send is what its pulls have left.
			mayBring := 0
			for _, p := range pulls {
				mayBring += p.left
			}
			if maxBytes > 0 && c.owedBytes < mayBring {
				t.Fatalf("seed %d step %d: the flow counts %d bytes owed, the pulls may bring %d: %+v", seed, step, c.owedBytes, mayBring, c)
			}
			if maxBytes > 0 && c.bytes+mayBring > maxBytes {
				if c.queued+c.running+c.finishing != 1 || mayBring != 0 {
					t.Fatalf("seed %d step %d: %d bytes held and %d may come against a bound of %d: %+v", seed, step, c.bytes, mayBring, maxBytes, c)
				}
				alone++
			}
		}
	}
	if handed == 0 {
		t.Error("no message was handed to a lingering runner: the walk missed that path")
	}
	if tooLarge == 0 || alone == 0 || requeued == 0 || held == 0 || adopted == 0 {
		t.Errorf("the walk missed a path: %d pulls ended by a message too large, %d steps holding one message over the byte bound, %d messages requeued, %d held for their dead letters, %d redeliveries adopted",
			tooLarge, alone, requeued, held, adopted)
	}
	t.Logf("%d messages handed to lingering runners, %d pulls ended by a message too large, %d steps holding one message over the byte bound, %d requeued, %d held for their dead letters, %d redeliveries adopted",
		handed, tooLarge, alone, requeued, held, adopted)
}

// A livePull is a pull as the server sees it: the messages it may still
// bring (n), and the bytes (left, if its maxBytes is not 0).
type livePull struct {
	pull
	left     int
	deadline time.Time
}

// heldBytes returns what the messages f holds, queued, running or
// finishing, weigh.
func heldBytes(f *flow, running []*runner, finishing []*message) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, m := range f.queue[f.head:] {
		n += m.size
	}
	for _, rn := range running {
		if rn.cur != nil {
			n += rn.cur.size
		}
	}
	for _, m := range finishing {
		n += m.size
	}
	return n
}

// heldOne returns a message that a runner of running runs, or one of
// finishing; nil if there is none.
func heldOne(running []*runner, finishing []*message, rng *rand.Rand) *message {
	if rn := busy(running, rng); rn != nil && (len(finishing) == 0 || rng.IntN(2) == 0) {
		return rn.cur
	}
	if len(finishing) > 0 {
		return finishing[rng.IntN(len(finishing))]
	}
	return nil
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
