package workerpool

import "time"

// Reaping. Idle workers park on the shared channel p.work, and a channel
// serves its parked receivers in the order they parked, so the next task,
// or the next quit (the zero job), goes to the worker idle longest. A worker
// stamps its record (worker.since) with the reaping clock's tick as it goes
// idle. At each tick the dispatcher counts the parked workers idle for at
// least a timeout and sends that many quits, never going below MinWorkers:
// they reach exactly those workers, the longest parked.
//
// Two things would make the count wrong, and reap a worker that has been
// idle for less than a timeout:
//   - A worker that has just been handed a task, but whose goroutine has not
//     run yet, still shows its old stamp. Such "stale" workers left the
//     channel first, so they are the oldest stamps: survey counts them by
//     comparing what the dispatcher sent (handed + quits) with what the
//     workers show they received, and reap subtracts them.
//   - Ticks can arrive late, or two close together, when the dispatcher was
//     busy. So eligibility is measured with the time each tick was handled,
//     not with tick counts: a worker stamped s went idle after tick s-1 was
//     handled and before tick s was, so it is idle for at least a timeout
//     once tick s was handled a timeout ago. With ticks one timeout apart,
//     it exits at the tick after that: between one and two timeouts after
//     it went idle.

// A reapClock is the dispatcher's reaping clock: a ticker that runs exactly
// while there is a worker above the minimum, so an idle pool at its minimum
// makes no wake-ups, and the times at which the last ticks were handled.
// The clock goroutine forwards the ticker's ticks as requests, so that the
// loop need not watch the ticker.
type reapClock struct {
	timeout time.Duration // < 0: never reap
	ticker  *time.Ticker  // nil until first needed
	ticking bool          // the ticker runs
	// handled[t%len] is when tick t was handled, for the last few ticks.
	handled [4]time.Time
}

// run starts or stops the ticker, as want says.
func (c *reapClock) run(p *Pool, want bool) {
	want = want && c.timeout > 0
	switch {
	case want && c.ticker == nil:
		c.ticker = time.NewTicker(c.timeout)
		p.live.Add(1)
		go p.clock(c.ticker.C)
	case want && !c.ticking:
		c.ticker.Reset(c.timeout)
	case !want && c.ticking:
		c.ticker.Stop() // no tick is received after Stop returns
	}
	c.ticking = want
}

// stop stops the ticker for good.
func (c *reapClock) stop() {
	if c.ticker != nil {
		c.ticker.Stop()
	}
	c.ticking = false
}

// handledAt returns when tick t was handled, or, for a tick too old to be
// remembered, a time no earlier: when the oldest remembered one was.
func (c *reapClock) handledAt(t, now uint64) time.Time {
	n := uint64(len(c.handled))
	if now-t >= n {
		t = now - n + 1
	}
	return c.handled[t%n]
}

// clock forwards the reaping ticker's ticks to the dispatcher until the
// pool is closing.
func (p *Pool) clock(ticks <-chan time.Time) {
	defer p.gone()
	tick := &request{kind: tickRequest} // never written
	for {
		select {
		case <-ticks:
			if !p.sendRequest(tick, p.closing, nil) {
				return
			}
		case <-p.closing:
			return
		}
	}
}

// A crew is the dispatcher's record of its workers: those started and not
// yet forgotten, which survey does once they have exited, and what the
// forgotten ones did. Only the dispatcher touches it; Status reads the
// registry it publishes.
type crew struct {
	all                                []*worker
	retiredDone, retiredSkipped, recvd uint64
}

// add lists w, a worker about to start.
func (c *crew) add(w *worker) { c.all = append(c.all, w) }

// registry returns the crew as Status sees it.
func (c *crew) registry() *registry {
	return &registry{workers: c.all, retiredDone: c.retiredDone, retiredSkipped: c.retiredSkipped}
}

// doneTasks returns how many of the tasks handed out the workers have done
// with: finished, or skipped because their submitters gave up on them.
func (c *crew) doneTasks() uint64 {
	n, _ := c.tasksAndOccupied()
	return n
}

// tasksAndOccupied returns doneTasks, and how many workers are not busy
// but occupied still, in the panic handler or the task observer of the
// task they finished, or reporting a keyed or a sub-pool's task's end: not
// free to take a task yet.
func (c *crew) tasksAndOccupied() (done uint64, occupied int) {
	done = c.retiredDone + c.retiredSkipped
	for _, w := range c.all {
		phase := w.phase.Load()
		done += phase>>1 + w.skipped.Load()
		// A worker stamps since 0 before it counts its task done, so one
		// seen not busy and 0 is not free yet.
		if phase&1 == 0 && w.since.Load() == 0 {
			occupied++
		}
	}
	return done, occupied
}

// survey counts the workers that look parked since a timeout before now,
// stale ones included, on clock at tick, and returns them with what the
// workers received: tasks and quits. It forgets the workers that have
// exited, keeping what they did, and reports whether it did.
func (c *crew) survey(clock *reapClock, tick uint64, now time.Time) (idle int, received uint64, forgot bool) {
	var live []*worker // once a worker has exited: the others
	for i, w := range c.all {
		phase, since := w.state()
		done, busy, skipped := phase>>1, phase&1, w.skipped.Load()
		if since == quitMark || since == retiredMark {
			// Gone: after receiving a quit, or after its last task.
			got := done + skipped
			if since == quitMark {
				got++
			}
			c.retiredDone += done
			c.retiredSkipped += skipped
			c.recvd += got
			if live == nil {
				live = append(make([]*worker, 0, len(c.all)), c.all[:i]...)
			}
			continue
		}
		if live != nil {
			live = append(live, w)
		}
		received += done + skipped + busy
		if busy == 0 && since != 0 && since <= tick && !clock.handledAt(since, tick).Add(clock.timeout).After(now) {
			idle++
		}
	}
	if live != nil {
		// A new array, not the old one compacted: Status may be reading
		// the old one.
		c.all = live
	}
	return idle, received + c.recvd, live != nil
}
