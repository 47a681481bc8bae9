package natsjs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A run is one call of Run. Its goroutines: the puller (Run's own
// goroutine), which sends plain pulls and, at the end, stops the run; the
// path's, which register the delivered messages and submit them to the
// pool when that takes no waiting (see register); the feeder, which
// submits the others; the watcher, which sends progress, watches the pool
// and the connection, and gives up on pulls and probes the server did not
// answer; the pool's workers, which run handlers and settle the messages
// that failed; and the acker, which acks the handled messages (ack.go).
//
// A stop hands messages back only once nothing is owed: the server
// redelivers a Nak'd message at once, to any pull waiting, and that could
// be one of this run's own, which would cost the message a delivery
// towards MaxDeliver each time it bounced.
type run struct {
	s     workerpool.Submitter
	cons  jetstream.Consumer
	h     Handler
	cfg   config
	name  string // the consumer's
	slots *slotBook
	path  path

	// What the pulls look like, fitted to the consumer when Run starts.
	maxBatch    int           // the most messages one pull asks for
	pullExpires time.Duration // how long a pull waits for messages
	// pullDeadline is how long after it is sent a pull may still bring
	// messages, past which the watcher gives up on it; 0 if the path
	// ends every pull itself. canCarry says that an ack may carry a pull.
	pullDeadline time.Duration
	canCarry     bool
	// pullAt and ackAt are how many free slots the puller waits for before
	// it pulls, and how many handled messages the acker waits for before
	// it acks them, while messages wait for a worker (see waiting):
	// batches cost fewer wake-ups of the process (see newRun).
	pullAt, ackAt int

	// Read again while the run runs (see refresh): the consumer's
	// MaxDeliver (0 or less: no limit), and the progress interval.
	maxDeliver    atomic.Int64
	progressEvery atomic.Int64 // a time.Duration
	checking      atomic.Bool  // a refresh is under way
	// pause is the puller's pause after a failed pull, doubling while they
	// fail; pauseUntil is when the pause ends, in Unix nanoseconds.
	pause, pauseUntil atomic.Int64

	// ctx is the run's stop signal, and the handlers' ctx: done when Run's
	// ctx is, or when the run ends for another reason, which is then in
	// err. Once it is done no handler starts and no message goes to the
	// pool: they wait for the stop to hand them back. One signal for both,
	// so that a handler that returns because its ctx is done cannot free a
	// worker that starts the next waiting message.
	ctx    context.Context
	cancel context.CancelFunc

	// queue carries registered messages to the feeder. Its capacity is
	// WithMaxInFlight, which no number of held messages exceeds, so
	// register never blocks on it: a pool with a bounded queue blocks the
	// feeder, while the path goes on registering the messages that
	// arrive, so that they get their progress messages.
	queue chan *message
	// feeding counts the messages sent on queue that the feeder has not
	// finished submitting: register adds, the feeder subtracts.
	feeding atomic.Int64

	mu sync.Mutex
	// held is every message taken and not yet settled or handed back, with
	// its stage. Guarded by mu.
	held map[*message]struct{}
	// handingBack is set once, by the stop when nothing is owed any more
	// and it hands back the waiting messages; from then on a message is
	// handed back at once. Guarded by mu.
	handingBack bool
	// err is why the run ended, if not because Run's ctx is done.
	// Guarded by mu.
	err error
	// running counts the handlers started. Add is called only under mu
	// while ctx is not done; the stop, which waits, has seen ctx done
	// before it takes mu to hand back, so every Add happens before Wait.
	running sync.WaitGroup
	// waiting counts the held messages in stage waiting, which the
	// workers are yet to start. It changes under mu, with a stage, and is
	// read without it. When it falls to zero, the workers are about to
	// run out of messages: the puller and the acker stop waiting for
	// their batches, and pullNow (buffer 1) tells the puller so.
	waiting atomic.Int64
	pullNow chan struct{}

	// toAck holds the handled messages that the acker is yet to ack, and
	// ackAll says to take them all, whatever ackAt says; both guarded by
	// ackMu. ackWake (buffer 1) tells the acker to look.
	ackMu   sync.Mutex
	toAck   []*message
	ackAll  bool
	ackWake chan struct{}
	// lastAcked is the last message the acker acked: a probe for pulls
	// the server did not answer acks it again (see sweep).
	lastAcked atomic.Pointer[message]

	errMu sync.Mutex // one call of the error handler at a time
}

// newRun returns the run of one Run call, its arguments checked, without
// its path.
func newRun(ctx context.Context, s workerpool.Submitter, cons jetstream.Consumer, h Handler, cfg config, size int) *run {
	// The slots beyond the pool's workers let messages wait for a worker
	// while others are pulled or acked. Waiting for half of them to be
	// free, or handled, before pulling, or acking, leaves the other half
	// waiting for the workers meanwhile, and saves wake-ups of a process
	// that would otherwise be idle. Those delay its timers, a handler's
	// time.Sleep among them: an idle Go process waits for its next timer
	// in coarse steps, counted from the last wake-up. Acks wait for at
	// most half the pool's size, so that a handled message is acked soon
	// even when WithMaxInFlight is large, and the watcher has them acked
	// at its next poll whatever their number.
	spare := cfg.maxInFlight - size
	r := &run{
		s: s, cons: cons, h: h, cfg: cfg,
		slots:   newSlotBook(cfg.maxInFlight),
		ackAt:   max(1, min(spare, size)/2),
		queue:   make(chan *message, cfg.maxInFlight),
		held:    make(map[*message]struct{}),
		pullNow: make(chan struct{}, 1),
		ackWake: make(chan struct{}, 1),
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	return r
}

// run is Run's body once its arguments were checked and its path made.
func (r *run) run() error {
	watcherDone := make(chan struct{})
	watcherExit := make(chan struct{})
	go func() {
		defer close(watcherDone)
		r.watch(watcherExit)
	}()
	feederDone := make(chan struct{})
	go func() {
		defer close(feederDone)
		r.feed()
	}()
	ackerDone := make(chan struct{})
	ackerExit := make(chan struct{})
	go func() {
		defer close(ackerDone)
		r.ackLoop(ackerExit)
	}()

	r.pullLoop()
	// From now on no pull starts, not even one an ack would carry: once
	// nothing is owed, nothing more comes.
	r.slots.stop()

	// Wait until nothing is owed: every pull ended, was served, or expired.
	for {
		if _, owed, _, _ := r.slots.counts(); owed == 0 {
			break
		}
		<-r.slots.changed // the watcher sweeps expired pulls
	}
	// Hand back, at once, every message whose handler has not started.
	// None will start now (r.ctx is done).
	r.handBackWaiting()
	// The feeder drains queue, submitting nothing more, and exits.
	close(r.queue)
	<-feederDone
	r.running.Wait()
	// Every handler has settled its message, and the acker acked every
	// handled one: wait for the server to confirm the acks.
	close(ackerExit)
	<-ackerDone
	for {
		if _, _, _, probing := r.slots.counts(); probing == 0 {
			break
		}
		<-r.slots.changed // an answer, or the watcher's timeout
	}
	close(watcherExit)
	<-watcherDone
	r.path.close()
	r.cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// end stops the run because of err, unless Run's ctx or an earlier call
// ended it already.
func (r *run) end(err error) {
	r.mu.Lock()
	if r.err == nil && r.ctx.Err() == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.cancel()
}

// report tells the error handler of err.
func (r *run) report(err error) {
	if r.cfg.onError == nil {
		return
	}
	r.errMu.Lock()
	defer r.errMu.Unlock()
	r.cfg.onError(err)
}

// watch sends progress for every held message each progress interval,
// reads the consumer again, checks the pool and the connection, and gives
// up on pulls and probes the server did not answer in time, every
// poolPoll, until exit is closed.
func (r *run) watch(exit <-chan struct{}) {
	every := time.Duration(r.progressEvery.Load())
	progress := time.NewTicker(every)
	defer progress.Stop()
	poll := time.NewTicker(poolPoll)
	defer poll.Stop()
	var msgs []*message // reused between ticks
	for {
		select {
		case <-progress.C:
			// Restart every held message's AckWait on the server.
			msgs = r.heldMsgs(msgs[:0])
			for _, m := range msgs {
				if err := m.progress(); err != nil {
					r.report(m.messageError("progress", err))
					if errors.Is(err, nats.ErrConnectionClosed) {
						r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, err))
					}
				}
			}
			clear(msgs)
			r.checkConsumer()
			if d := time.Duration(r.progressEvery.Load()); d != every && d > 0 {
				every = d
				progress.Reset(every)
			}
		case <-poll.C:
			r.poll()
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
	if r.path.closed() {
		r.end(fmt.Errorf("natsjs: Run: consumer %q: %w", r.name, nats.ErrConnectionClosed))
		// Nothing more can come: no message, no status, no answer.
		r.slots.abandonPulls()
		for _, p := range r.slots.expireProbes(now, true) {
			r.reportProbe(p, fmt.Errorf("%w: %w", ErrNotConfirmed, nats.ErrConnectionClosed))
		}
		return
	}
	// Pulls the server neither served nor ended in time were lost, with
	// their messages perhaps: a probe on the last ack frees their slots
	// once the server confirms it has the acks sent before. Lost pulls
	// may also mean a consumer gone.
	last := r.lastAcked.Load()
	if lost, id := r.slots.sweep(now, last != nil, now.Add(settleTimeout)); lost > 0 {
		r.report(fmt.Errorf("natsjs: Run: consumer %q: %d messages asked for were neither delivered nor returned by the pulls' expiry", r.name, lost))
		if id != 0 {
			r.path.confirm(last, id)
		}
		r.checkConsumer()
	}
	for _, p := range r.slots.expireProbes(now, false) {
		r.reportProbe(p, ErrNotConfirmed)
	}
	// Handled messages wait for a batch at most until now.
	r.ackNow()
}

// heldMsgs appends every held message to buf.
func (r *run) heldMsgs(buf []*message) []*message {
	r.mu.Lock()
	defer r.mu.Unlock()
	for m := range r.held {
		buf = append(buf, m)
	}
	return buf
}

// handBackWaiting hands back every message whose handler has not started.
// Only the stop calls it, once nothing is owed and r.ctx is done.
func (r *run) handBackWaiting() {
	var back []*message
	r.mu.Lock()
	r.handingBack = true
	for m := range r.held {
		if m.stage == waiting {
			m.stage = handedBack
			r.waiting.Add(-1)
			delete(r.held, m)
			back = append(back, m)
		}
	}
	r.mu.Unlock()
	// No message waits now, nor will: the acker acks whatever comes.
	r.ackNow()
	for _, m := range back {
		r.handBack(m)
	}
}

// handBack returns a message that is no longer held to the server for
// immediate redelivery, and frees its slot.
func (r *run) handBack(m *message) {
	if !m.close() {
		r.sent(m, "nak", m.wire.Nak()) // if lost, the server redelivers after AckWait
	}
	r.slots.releaseHeld(1)
}

// poolSize returns the size of s: the pool's maximum, or the sub-pool's
// limit.
func poolSize(s workerpool.Submitter) int {
	switch s := s.(type) {
	case *workerpool.Pool:
		return s.Size()
	case *workerpool.Subpool:
		return s.Status().MaxWorkers
	}
	return 0
}

// poolStopped reports whether s was stopped: the pool, or the sub-pool or
// its pool.
func poolStopped(s workerpool.Submitter) bool {
	switch s := s.(type) {
	case *workerpool.Pool:
		return s.Stopped()
	case *workerpool.Subpool:
		st := s.Status().State
		return st == workerpool.Stopping || st == workerpool.Stopped
	}
	return false
}
