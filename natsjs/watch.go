package natsjs

import (
	"errors"
	"fmt"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go"
)

// The watcher: progress for every held message, the consumer read again,
// and a regular look at the pool, the connection, the pulls and the
// probes.

// watch sends progress for every held message each progress interval,
// reads the consumer again then (at most once a second), and polls (see
// poll) every poolPoll, until exit is closed. During the stop, it reads
// the consumer every second: handlers in their grace period should lose
// their ctx as soon as their consumer is deleted, not a progress interval
// later.
func (r *run) watch(exit <-chan struct{}) {
	every := time.Duration(r.progressEvery.Load())
	progress := time.NewTicker(every)
	defer progress.Stop()
	poll := time.NewTicker(poolPoll)
	defer poll.Stop()
	var msgs []*message // reused between ticks
	var lastRead time.Time
	for {
		select {
		case <-progress.C:
			// Restart every held message's AckWait on the server.
			msgs = r.flow.held(msgs[:0])
			for _, m := range msgs {
				if err := m.progress(); err != nil {
					r.report(m.messageError("progress", err))
					if errors.Is(err, nats.ErrConnectionClosed) {
						r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
					}
				}
			}
			clear(msgs)
			// Read the consumer again, but not more than once a second:
			// a short progress interval would flood the server.
			if now := time.Now(); now.Sub(lastRead) >= time.Second {
				lastRead = now
				r.checkConsumer()
			}
			if d := time.Duration(r.progressEvery.Load()); d != every && d > 0 {
				every = d
				progress.Reset(every)
			}
		case <-poll.C:
			r.poll()
			if now := time.Now(); r.stopping.Load() && now.Sub(lastRead) >= time.Second {
				lastRead = now
				r.checkConsumer()
			}
		case <-exit:
			return
		}
	}
}

// poll is the watcher's regular look around.
func (r *run) poll() {
	// Nothing tells us when the pool stops but asking it.
	if poolStopped(r.s) {
		r.end(workerpool.ErrStopped)
	}
	now := time.Now()
	if r.nc.IsClosed() {
		r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, nats.ErrConnectionClosed))
		// Nothing more can come: no message, no status, no answer.
		r.flow.abandonPulls()
		r.notConfirmed(r.flow.expireProbes(now, true), nats.ErrConnectionClosed)
		return
	}
	// A probe sent before a reconnection proves nothing: the acks before
	// it may have died with the connection, and its answer with them.
	if rc := r.nc.Stats().Reconnects; rc != r.reconnects {
		r.reconnects = rc
		r.notConfirmed(r.flow.expireProbes(now, true), errReconnected)
	}
	// Pulls the server neither served nor ended in time were lost, with
	// their messages perhaps: a probe on the last ack frees their slots
	// once the server confirms it has the acks sent before. Lost pulls
	// may also mean a consumer gone.
	last := r.lastAcked.Load()
	if lost, id := r.flow.sweep(now, last != nil, now.Add(r.cfg.settleTimeout)); lost > 0 {
		r.report(fmt.Errorf("natsjs: Run: consumer %q: %d messages asked for were neither delivered nor returned by the pulls' expiry", r.name, lost))
		if id != 0 {
			r.probe(last, id)
		}
		r.checkConsumer()
	}
	r.notConfirmed(r.flow.expireProbes(now, false), ErrNotConfirmed)
	// Acks no pull carried: the server confirms them, and plain pulls may
	// take their slots.
	r.probeAcked()
	r.setParams()
	r.submitRunners(r.flow.dueRunners())
}

// notConfirmed reports n acks whose probes got no answer: their messages
// may come back. These acks were sent before the stop, as it ran: Run
// returns an error only for the settlings of the stop itself.
func (r *run) notConfirmed(n int, cause error) {
	if n == 0 {
		return
	}
	if cause != ErrNotConfirmed {
		cause = fmt.Errorf("%w: %w", ErrNotConfirmed, cause)
	}
	r.report(fmt.Errorf("natsjs: Run: consumer %q: the server did not confirm %d acks (or pulls given up on): %w", r.name, n, cause))
}
