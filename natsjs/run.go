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

// A run is one call of Consume. Five kinds of goroutine touch it: the
// puller (Consume's own goroutine), which takes slots, pulls, registers
// messages and, at the end, hands back the ones not started; the feeder,
// which submits them to the pool; the watcher, which sends progress,
// watches the pool and tells the handlers of a stop; the pool's workers,
// which run handlers and settle the messages that failed; and the acker,
// which acks the handled messages and confirms the acks (see ack.go).
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

	// ctx is the run's stop signal: done when Consume's ctx is, or when
	// the run ends for another reason, which is then in err.
	ctx    context.Context
	cancel context.CancelFunc
	// handlerCtx is the handlers' ctx. The watcher cancels it once it has
	// set stopping after ctx is done, so that no handler starts once one
	// sees its ctx done: a handler returning on it frees a worker that
	// would otherwise start the next waiting message.
	handlerCtx    context.Context
	cancelHandler context.CancelFunc

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

	mu sync.Mutex
	// held is every message taken and not yet settled or handed back, with
	// its stage. Guarded by mu.
	held map[*message]struct{}
	// stopping is set once, by the watcher when ctx is done; from then on
	// no handler starts and no message goes to the pool: they wait for the
	// puller to hand them back. Guarded by mu.
	stopping bool
	// handingBack is set once, by the puller when no pull is outstanding
	// any more and it hands back the waiting messages; from then on a
	// message is handed back at once. Guarded by mu.
	handingBack bool
	// err is why the run ended, if not because Consume's ctx is done.
	// Guarded by mu.
	err error
	// running counts the handlers started. Add is called only under mu
	// while stopping is false, so every Add happens before the Wait that
	// follows setting stopping.
	running sync.WaitGroup

	// toAck holds the handled messages that the acker is yet to ack and
	// confirm; guarded by ackMu. ackWake (buffer 1) tells the acker that
	// toAck has grown.
	ackMu   sync.Mutex
	toAck   []*message
	ackWake chan struct{}
}

// A message is one message the run holds. Its handler gets it as its
// jetstream.Msg, so that the acker knows which messages the handler
// settled itself (see ack.go).
type message struct {
	jetstream.Msg
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
	r := &run{
		p: p, cons: cons, h: h, cfg: cfg,
		maxDeliver: maxDeliver,
		maxBatch:   maxBatch,
		slots:      make(chan struct{}, cfg.maxInFlight),
		queue:      make(chan *message, cfg.maxInFlight),
		held:       make(map[*message]struct{}),
		ackWake:    make(chan struct{}, 1),
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.handlerCtx, r.cancelHandler = context.WithCancel(context.WithoutCancel(ctx))
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
	// handler has not started. None will start now (stopping is set).
	r.stop()
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

// pull takes slots, pulls as many messages as it took and registers them,
// until r.ctx is done. It returns once no pull is outstanding.
func (r *run) pull() {
	var pause time.Duration // after a failed pull; doubles while they fail
	for {
		n := r.takeSlots()
		if n == 0 {
			return
		}
		batch, err := r.cons.Fetch(n, jetstream.FetchMaxWait(pullWait))
		if err == nil {
			// The batch's channel has room for the whole batch, and is
			// closed when the server ends the pull, so reading it to the
			// end leaves no message sent to a pull nobody reads.
			got := 0
			for msg := range batch.Messages() {
				got++
				r.register(msg)
			}
			r.releaseSlots(n - got)
			err = batch.Error()
		} else {
			r.releaseSlots(n)
		}
		if err == nil || r.ctx.Err() != nil {
			pause = 0
			continue
		}
		if r.fatal(err) {
			return
		}
		pause = min(max(2*pause, 50*time.Millisecond), 2*time.Second)
		select {
		case <-time.After(pause):
		case <-r.ctx.Done():
		}
	}
}

// takeSlots waits for a free slot, then takes every other free one up to a
// batch. It returns how many it took, or 0 if r.ctx is done.
func (r *run) takeSlots() int {
	select {
	case <-r.ctx.Done():
		return 0
	default:
	}
	select {
	case r.slots <- struct{}{}:
	case <-r.ctx.Done():
		return 0
	}
	n := 1
	for n < r.maxBatch {
		select {
		case r.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// releaseSlots gives n slots back.
func (r *run) releaseSlots(n int) {
	for range n {
		<-r.slots
	}
}

// fatal reports whether a failed pull ends the run, and ends it if so: when
// the consumer or its stream is gone or the connection is closed. Anything
// else (a timeout, a server restarting, a leader changing) is worth another
// pull.
func (r *run) fatal(err error) bool {
	switch {
	case errors.Is(err, jetstream.ErrConsumerDeleted),
		errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrStreamNotFound),
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrBadSubscription):
	case errors.Is(err, jetstream.ErrBadRequest):
		// A request the server refuses will be refused again.
	default:
		// No responders, among others, is what a pull to a consumer that
		// no longer exists gets: ask the server whether it does.
		ctx, cancel := context.WithTimeout(r.ctx, settleTimeout)
		_, infoErr := r.cons.Info(ctx)
		cancel()
		if !errors.Is(infoErr, jetstream.ErrConsumerNotFound) && !errors.Is(infoErr, jetstream.ErrStreamNotFound) {
			return false
		}
		err = infoErr
	}
	r.end(fmt.Errorf("natsjs: Consume: pulling from consumer %q: %w", r.cons.CachedInfo().Name, err))
	return true
}

// register takes charge of a message a pull brought, in the slot taken for
// it: it holds it and hands it to the feeder, unless the run is stopping.
func (r *run) register(msg jetstream.Msg) {
	m := &message{Msg: msg}
	r.mu.Lock()
	r.held[m] = struct{}{}
	stopping := r.stopping
	r.mu.Unlock()
	if !stopping {
		r.queue <- m // never blocks: see queue
	}
}

// feed submits the registered messages to the pool, in the order they
// came, until the puller closes queue.
func (r *run) feed() {
	for m := range r.queue {
		r.submit(m)
	}
}

// submit submits m's task to the pool. If the pool does not take it, m
// stays held, waiting, until the stop hands it back; if the pool is
// stopped, it ends the run.
func (r *run) submit(m *message) {
	task := func() { r.runTask(m) }
	var pause time.Duration // while the pool's bounded queue rejects
	for {
		r.mu.Lock()
		stopping := r.stopping
		r.mu.Unlock()
		if stopping {
			return
		}
		err := r.p.SubmitCtx(r.ctx, task)
		switch {
		case err == nil:
			return
		case errors.Is(err, workerpool.ErrQueueFull):
			// The pool rejects rather than waits (WithOverflow(Reject)):
			// wait for room ourselves; progress keeps m meanwhile.
			pause = min(max(2*pause, time.Millisecond), 50*time.Millisecond)
			select {
			case <-time.After(pause):
				continue
			case <-r.ctx.Done():
			}
		case errors.Is(err, workerpool.ErrStopped):
			r.end(workerpool.ErrStopped)
		}
		return // stopping: the puller hands m back
	}
}

// watch sends progress for every held message each progress interval,
// checks the pool every poolPoll, and stops the handlers as soon as r.ctx
// is done, until exit is closed.
func (r *run) watch(exit <-chan struct{}) {
	progress := time.NewTicker(r.cfg.progress)
	defer progress.Stop()
	poll := time.NewTicker(poolPoll)
	defer poll.Stop()
	stop := r.ctx.Done()
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
		case <-stop:
			// No handler may start from now on, while the puller waits
			// for its last pull; only then are the handlers told.
			r.stop()
			stop = nil
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

// stop sets stopping, so that no handler starts, then cancels the
// handlers' ctx.
func (r *run) stop() {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.cancelHandler()
}

// handBackWaiting hands back every message whose handler has not started.
// Only the puller calls it, once no pull is outstanding and stopping is set.
func (r *run) handBackWaiting() {
	var back []*message
	r.mu.Lock()
	r.handingBack = true
	for m := range r.held {
		if m.stage == waiting {
			m.stage = handedBack
			delete(r.held, m)
			back = append(back, m)
		}
	}
	r.mu.Unlock()
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
