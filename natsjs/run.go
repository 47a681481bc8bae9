package natsjs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go/jetstream"
)

// A run is one call of Consume. Five kinds of goroutine touch it: the
// puller (Consume's own goroutine), which takes slots, pulls, registers
// messages, submits them to the pool when that takes no waiting and, at
// the end, hands back the ones not started; the feeder, which submits the
// others; the watcher, which sends progress and watches the pool; the
// pool's workers, which run handlers and settle the messages that failed;
// and the acker, which acks the handled messages and confirms the acks (see
// ack.go).
//
// A stop hands messages back only once no pull is outstanding: the server
// redelivers a Nak'd message at once, to any pull waiting, and that could be
// this process's own last pull, which would cost the message a delivery
// towards MaxDeliver each time it bounced.
type run struct {
	p          *workerpool.Pool
	cons       jetstream.Consumer
	h          Handler
	cfg        config
	maxDeliver int // the consumer's MaxDeliver; 0 or less: no limit
	maxBatch   int // the most messages one pull asks for
	// pullAt and ackAt are how many free slots the puller waits for before
	// it pulls, and how many handled messages the acker waits for before
	// it acks and confirms them, while messages wait for a worker (see
	// waiting): batches cost fewer round trips, and fewer wake-ups of an
	// idle process, which delay its timers (see newRun).
	pullAt, ackAt int

	// ctx is the run's stop signal, and the handlers' ctx: done when
	// Consume's ctx is, or when the run ends for another reason, which is
	// then in err. Once it is done no handler starts and no message goes
	// to the pool: they wait for the puller to hand them back. One signal
	// for both, so that a handler that returns because its ctx is done
	// cannot free a worker that starts the next waiting message.
	ctx    context.Context
	cancel context.CancelFunc

	// slots is the in-flight bound: the puller sends to take a slot before
	// it pulls, and whoever ends a message's stay receives to give its slot
	// back, as does the puller for what a pull asked for and did not bring.
	// Its capacity is WithMaxInFlight, so the sends block exactly when the
	// process holds, or may yet be sent, that many messages.
	slots chan struct{}
	// queue carries registered messages from the puller to the feeder. Its
	// capacity is WithMaxInFlight, which no number of held messages
	// exceeds, so the puller never blocks on it: a pool with a bounded
	// queue blocks the feeder, while the puller goes on registering the
	// messages that arrive, so that they get their progress messages.
	queue chan *message
	// feeding counts the messages sent on queue that the feeder has not
	// finished submitting: the puller adds, the feeder subtracts.
	feeding atomic.Int64

	mu sync.Mutex
	// held is every message taken and not yet settled or handed back, with
	// its stage. Guarded by mu.
	held map[*message]struct{}
	// handingBack is set once, by the puller when no pull is outstanding
	// any more and it hands back the waiting messages; from then on a
	// message is handed back at once. Guarded by mu.
	handingBack bool
	// err is why the run ended, if not because Consume's ctx is done.
	// Guarded by mu.
	err error
	// running counts the handlers started. Add is called only under mu
	// while ctx is not done; the puller, which waits, has seen ctx done
	// before it takes mu to hand back, so every Add happens before Wait.
	running sync.WaitGroup
	// waiting counts the held messages in stage waiting, which the
	// workers are yet to start. It changes under mu, with a stage, and is
	// read without it. When it falls to zero, the workers are about to
	// run out of messages: the puller and the acker stop waiting for
	// their batches, and pullNow (buffer 1) tells the puller so.
	waiting atomic.Int64
	pullNow chan struct{}

	// toAck holds the handled messages that the acker is yet to ack and
	// confirm, and ackAll says to take them all, whatever ackAt says;
	// both guarded by ackMu. ackWake (buffer 1) tells the acker to look.
	ackMu   sync.Mutex
	toAck   []*message
	ackAll  bool
	ackWake chan struct{}
}

// A message is one message the run holds. Its handler gets it as its
// jetstream.Msg, so that the acker knows which messages the handler
// settled itself (see ack.go).
type message struct {
	jetstream.Msg
	task    func()      // its task on the pool: runTask(m)
	stage   stage       // guarded by run.mu
	settled atomic.Bool // the handler acked, nak'd or terminated it
}

// stage is where a held message is.
type stage int

const (
	waiting    stage = iota // registered; its task has not started
	started                 // its handler is running or it is being settled
	handedBack              // handed back by a stop; its task does nothing
)

func newRun(ctx context.Context, p *workerpool.Pool, cons jetstream.Consumer, h Handler, cfg config, maxDeliver, maxBatch int) *run {
	// The slots beyond the pool's workers let messages wait for a worker
	// while others are pulled or confirmed. Waiting for half of them to be
	// free, or handled, before pulling, or confirming, leaves the other
	// half waiting for the workers meanwhile, and saves round trips: CPU,
	// and wake-ups of a process that would otherwise be idle. Those delay
	// its timers, a handler's time.Sleep among them: an idle Go process
	// waits for its next timer in coarse steps, counted from the last
	// wake-up. Acks wait for at most half the pool's size, so that a
	// handled message is acked soon even when WithMaxInFlight is large,
	// and the watcher has them confirmed at its next poll whatever their
	// number.
	spare := cfg.maxInFlight - p.Size()
	r := &run{
		p: p, cons: cons, h: h, cfg: cfg,
		maxDeliver: maxDeliver,
		maxBatch:   maxBatch,
		pullAt:     max(1, min(spare/2, maxBatch)),
		ackAt:      max(1, min(spare, p.Size())/2),
		slots:      make(chan struct{}, cfg.maxInFlight),
		queue:      make(chan *message, cfg.maxInFlight),
		held:       make(map[*message]struct{}),
		pullNow:    make(chan struct{}, 1),
		ackWake:    make(chan struct{}, 1),
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	return r
}

// run is Consume's body once its arguments were checked.
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

	r.pull()

	// No pull is outstanding: hand back, at once, every message whose
	// handler has not started. None will start now (r.ctx is done).
	r.handBackWaiting()
	// The feeder drains queue, submitting nothing more, and exits.
	close(r.queue)
	<-feederDone
	r.running.Wait()
	// Every handler has settled its message and the acker confirmed every
	// ack: nothing needs progress or confirming now.
	close(ackerExit)
	close(watcherExit)
	<-ackerDone
	<-watcherDone
	r.cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// end stops the run because of err, unless Consume's ctx or an earlier
// call ended it already.
func (r *run) end(err error) {
	r.mu.Lock()
	if r.err == nil && r.ctx.Err() == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.cancel()
}

// watch sends progress for every held message each progress interval and
// checks the pool every poolPoll, until exit is closed.
func (r *run) watch(exit <-chan struct{}) {
	progress := time.NewTicker(r.cfg.progress)
	defer progress.Stop()
	poll := time.NewTicker(poolPoll)
	defer poll.Stop()
	var msgs []jetstream.Msg // reused between ticks
	for {
		select {
		case <-progress.C:
			// Restart every held message's AckWait on the server.
			msgs = r.heldMsgs(msgs[:0])
			for _, msg := range msgs {
				_ = msg.InProgress() // a lost one is retried next tick
			}
			clear(msgs)
		case <-poll.C:
			// Nothing tells us when the pool stops but asking it.
			if r.p.Stopped() {
				r.end(workerpool.ErrStopped)
			}
			// Handled messages wait for a batch at most until now.
			r.ackNow()
		case <-exit:
			return
		}
	}
}

// heldMsgs appends every held message to buf.
func (r *run) heldMsgs(buf []jetstream.Msg) []jetstream.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	for m := range r.held {
		buf = append(buf, m.Msg)
	}
	return buf
}

// handBackWaiting hands back every message whose handler has not started.
// Only the puller calls it, once no pull is outstanding and r.ctx is done.
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
// immediate redelivery, and gives its slot back.
func (r *run) handBack(m *message) {
	_ = m.Msg.Nak() // if lost, the server redelivers after AckWait
	r.releaseSlots(1)
}
