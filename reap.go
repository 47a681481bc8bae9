package workerpool

import "time"

// Reaping. The hand-off keeps the parked workers in the order they parked
// and stamps each with the reaping clock's tick (see handoff.Reap); the
// clock is a goroutine beside the loop, which runs only while there are
// more workers than the minimum, so that an idle pool at its minimum makes
// no wake-ups. Reaping as a timer case of the loop's select would cost
// every task the wider select; beside the loop it costs the tasks nothing.

// reapClock ticks once an idle timeout and has the hand-off tell the
// workers idle for a timeout to exit, until there are no more workers
// than the minimum, or the pool is closing. The loop starts it when the
// hand-off says it is needed (handoff.NeedsClock).
func (s *state) reapClock() {
	defer s.gone()
	t := time.NewTicker(s.hand.Timeout())
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			if !s.hand.Reap(now) {
				return
			}
		case <-s.closing:
			return
		}
	}
}
