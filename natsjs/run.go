package natsjs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A run is one call of Run. Its goroutines: the puller (Run's own
// goroutine), which sends plain pulls and submits runners and, at the
// end, stops the run; the subscription's, in the client, which takes in
// the delivered messages (pull.go); the runners, on the pool's workers,
// which run the handlers and settle the messages, each ack carrying a
// pull when one is due (runner.go, settle.go); and the watcher, which
// sends progress, watches the pool and the connection, gives up on pulls
// and probes the server did not answer, and probes unconfirmed acks.
type run struct {
	s         workerpool.Submitter
	js        jetstream.JetStream
	nc        *nats.Conn
	cons      jetstream.Consumer
	h         Handler
	cfg       config
	name      string // the consumer's
	stream    jetstream.Stream
	workQueue bool // its stream is a work queue: a copy reaches it alone
	// The stream's per-subject limit (MaxMsgsPerSubject, 0 or less: none)
	// and whether it refuses a message over it (DiscardNewPerSubject)
	// rather than drop the oldest of the subject, as read when Run starts:
	// they decide whether a copy can take its message's place (see
	// publishCopy).
	perSubject        int64
	refusesPerSubject bool
	// The stream's bounds (MaxMsgs, MaxBytes; 0 or less: none) where it
	// makes room for a new message by dropping its oldest (DiscardOld), as
	// read when Run starts: there a copy published while the stream is
	// full would push out another message (see publishCopy). With
	// DiscardNew they are 0: the server refuses such a copy itself.
	maxMsgs, maxBytes int64
	flow              *flow
	runnerTask        func() // r.runnerTask, made once: submitting it allocates nothing

	// The subscription and what pulls look like, fitted to the consumer
	// when Run starts.
	sub          *nats.Subscription
	nextSubject  string        // the consumer's pull subject
	inbox        string        // the prefix of the reply subjects, ending in "."
	maxBatch     int           // the most messages one pull asks for
	pullExpires  time.Duration // how long a pull waits for messages
	pullDeadline time.Duration // how long after it is sent a pull may still bring messages

	// Read again while the run runs (see refresh): the consumer's
	// MaxDeliver (0 or less: no limit), BackOff and the progress interval;
	// and a pull's round trip, measured.
	maxDeliver    atomic.Int64
	backOff       atomic.Pointer[[]time.Duration]
	progressEvery atomic.Int64 // a time.Duration
	rtt           atomic.Int64 // a time.Duration
	checking      atomic.Bool  // a refresh is under way
	// pause is the puller's pause after a failed pull, doubling while they
	// fail; pauseUntil is when the pause ends, in Unix nanoseconds.
	pause, pauseUntil atomic.Int64

	// parent is Run's ctx. stopCtx is done when it is, or when the run
	// ends for another reason, which is then in err: no pull is sent and
	// no handler starts after that. hctx is the handlers' ctx, with
	// parent's values: cancelled a grace period after parent is done, or
	// at once when the run ends for another reason.
	parent   context.Context
	stopCtx  context.Context
	stopAll  context.CancelFunc
	hctx     context.Context
	hcancel  context.CancelFunc
	stopping atomic.Bool // the stop has begun: settlings ask to be confirmed
	gone     atomic.Bool // the consumer or its stream is gone (see lose)

	// lastAcked is a message the run acked: a probe acks it again.
	lastAcked atomic.Pointer[message]
	// reconnects is the client's count of reconnections, as the watcher
	// last saw it. Owned by the watcher.
	reconnects uint64
	// unconfirmed counts what the stop settled and the server did not
	// confirm.
	unconfirmed atomic.Int64

	mu  sync.Mutex
	err error // why the run ended, if not because parent is done; guarded by mu

	errMu sync.Mutex // one call of the error handler at a time

	// bg counts the consumer checks under way; once bgClosed, none starts.
	// Guarded by bgMu. checkCtx bounds them: it is cancelled once the run
	// is over, not at the stop, during which a deleted consumer must
	// still be noticed.
	checkCtx  context.Context
	endChecks context.CancelFunc
	bgMu      sync.Mutex
	bg        sync.WaitGroup
	bgClosed  bool

	// backs counts the hand-backs and dead letters under way, in
	// goroutines of their own; once backsClosed, one runs in its caller.
	// Guarded by backsMu.
	backsMu     sync.Mutex
	backs       sync.WaitGroup
	backsClosed bool
}

// Timing of a run.
const (
	// defaultAckWait is the server's AckWait for a consumer that sets none.
	defaultAckWait = 30 * time.Second
	// pullWait is how long one pull waits for messages: about the longest
	// a stop waits for its pulls to end before it hands messages back (see
	// the package doc). An idle process sends a few pulls a second.
	pullWait = 250 * time.Millisecond
	// minPullWait is the shortest pull Run sends; a consumer whose
	// MaxRequestExpires is shorter would have it pull without a pause.
	minPullWait = 10 * time.Millisecond
	// poolPoll is how often Run checks whether its pool was stopped or
	// resized, gives up on pulls and probes the server did not answer in
	// time, and probes acks no pull carried.
	poolPoll = 100 * time.Millisecond
	// apiTimeout bounds a handler's DoubleAck whose ctx has no deadline,
	// as jetstream's default API timeout does for its own messages.
	apiTimeout = 5 * time.Second
	// minHorizon and horizonRTTs give the horizon: how long the messages
	// waiting for the runners should last them, a runner's turn, and how
	// long it lingers for the next message. A few round trips, so that a
	// pull that is due comes back before the runners run out, on a machine
	// whose scheduler delays the client's goroutines and the server's
	// too; and at least minHorizon: below it, short jobs run the runners
	// dry, or get small pulls, each of which costs the server and the
	// client more than its messages do (the commits that set it have the
	// figures).
	minHorizon  = 10 * time.Millisecond
	horizonRTTs = 4
)

// settleTimeout bounds the wait for the server's confirmation of a
// settling, and for a copy's publication.
const settleTimeout = 5 * time.Second

// run is Run's body once its arguments were checked.
func (r *run) run() error {
	r.setParams()
	watcherDone := make(chan struct{})
	watcherExit := make(chan struct{})
	go func() {
		defer close(watcherDone)
		r.watch(watcherExit)
	}()

	r.pullLoop()
	r.stop()

	close(watcherExit)
	<-watcherDone
	r.bgMu.Lock()
	r.bgClosed = true
	r.bgMu.Unlock()
	r.endChecks()
	r.bg.Wait()
	r.stopAll()
	r.hcancel()

	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if n := r.unconfirmed.Load(); n > 0 {
		return fmt.Errorf("natsjs: Run: consumer %q: the server did not confirm %d of the settlings of the stop: %w", r.name, n, ErrNotConfirmed)
	}
	return nil
}

// stop is the end of a run, once stopCtx is done: no pull is sent, no
// handler starts. The running handlers keep their ctx for the grace
// period; as soon as the pulls sent have ended, the queued messages are
// handed back; then the stop waits for the handlers, and for the server
// to confirm what it settled.
//
// It hands messages back only once nothing is owed: the server redelivers
// a Nak'd message at once, to any pull waiting, and that could be one of
// this run's own, which would cost the message a delivery towards
// MaxDeliver each time it bounced.
func (r *run) stop() {
	r.beginStop()
	grace := time.AfterFunc(r.cfg.grace, r.hcancel)
	defer grace.Stop()

	r.waitFlow(func(c flowCounts) bool { return c.owed == 0 })
	for _, m := range r.flow.handBack() {
		r.giveBackAsync(m)
	}
	// Every handler returned, and every message they ran was settled
	// (acked, handed back, or its dead letter published or given up on),
	// confirmed: confirm the plain acks sent before the stop.
	r.waitFlow(func(c flowCounts) bool { return c.active == 0 && c.running == 0 && c.finishing == 0 })
	r.probeAcked()
	r.waitFlow(func(c flowCounts) bool { return c.probing == 0 })

	_ = r.sub.Unsubscribe()
	r.backsMu.Lock()
	r.backsClosed = true
	r.backsMu.Unlock()
	r.backs.Wait()
}

// beginStop stops the flow: no pull is sent, no runner takes a message,
// and what runners settle from now on asks to be confirmed. It runs as
// soon as stopCtx is done, first thing when the run ends for another
// reason (see end), and again as a runner or the stop sees it done.
func (r *run) beginStop() {
	if r.stopping.CompareAndSwap(false, true) {
		r.flow.stop()
	}
}

// waitFlow waits until done says the flow's counts are what the stop
// waits for. The watcher gives up on what the server does not answer.
func (r *run) waitFlow(done func(flowCounts) bool) {
	for !done(r.flow.counts()) {
		<-r.flow.changed
	}
}

// giveBackAsync hands back m, which no handler took, in a goroutine of its
// own: the subscription's goroutine must go on delivering the answers of
// probes. m keeps its progress until its settling goes out (see send): a
// copy may take longer than AckWait to be stored.
func (r *run) giveBackAsync(m *message) {
	m.hold()
	r.flow.givingBackStart(m)
	r.async(func() {
		defer r.flow.givingBackDone(m)
		r.giveBack(m)
	})
}

// async runs f, a settling that may wait for the server, in a goroutine
// of its own, which the end of the stop waits for; in the caller once the
// stop is past the point where it waits.
func (r *run) async(f func()) {
	r.backsMu.Lock()
	if r.backsClosed {
		r.backsMu.Unlock()
		f()
		return
	}
	r.backs.Add(1)
	r.backsMu.Unlock()
	go func() {
		defer r.backs.Done()
		f()
	}()
}

// handBackLate hands back a message that arrived with no slot for it, or
// once the stop had handed back the rest.
func (r *run) handBackLate(m *message) { r.giveBackAsync(m) }

// end stops the run because of err, unless Run's ctx or an earlier call
// ended it already. The handlers' ctx is cancelled at once: without the
// pool, the consumer or the connection, what they do cannot be settled.
// In that order: no runner takes a message any more, then the handlers
// lose their ctx, then the stop begins. So a handler that returns because
// it lost its ctx is not followed by another, and no message the stop
// hands back reaches another process while a handler here still has its
// ctx.
func (r *run) end(err error) {
	r.mu.Lock()
	if r.err == nil && r.parent.Err() == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.beginStop()
	r.hcancel()
	r.stopAll()
}

// lose ends the run because its consumer or its stream is gone, as end
// does, and also during a stop caused by ctx: the grace period ends at
// once, since what the handlers do can no longer be settled, and Run
// returns err rather than nil.
func (r *run) lose(err error) {
	r.gone.Store(true)
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.beginStop()
	r.hcancel()
	r.stopAll()
}

// report tells the error handler of err. A panic in the error handler is
// logged and dropped: it must not end the runner, the watcher or the
// subscription's goroutine that reports, which would leave messages
// unsettled.
func (r *run) report(err error) {
	if r.cfg.onError == nil {
		return
	}
	r.errMu.Lock()
	defer r.errMu.Unlock()
	defer func() {
		if v := recover(); v != nil {
			slog.Error("natsjs: the error handler panicked", "consumer", r.name, "panic", v, "error", err)
		}
	}()
	r.cfg.onError(err)
}

// setConsumer takes in the consumer's configuration: its MaxDeliver,
// BackOff and, unless WithProgressInterval set it, the progress interval.
func (r *run) setConsumer(c jetstream.ConsumerConfig) {
	r.maxDeliver.Store(int64(c.MaxDeliver))
	backOff := append([]time.Duration(nil), c.BackOff...)
	r.backOff.Store(&backOff)
	if r.cfg.progress == 0 {
		r.progressEvery.Store(int64(redeliveryFloor(c) / 3))
	}
}

// sampleRTT takes in a round trip to the server.
func (r *run) sampleRTT(d time.Duration) {
	old := time.Duration(r.rtt.Load())
	if old > 0 {
		d = old + (d-old)/4
	}
	r.rtt.Store(int64(d))
}

// setParams gives the flow the pool's size, which Resize may change, and
// the horizon.
func (r *run) setParams() {
	horizon := max(minHorizon, horizonRTTs*time.Duration(r.rtt.Load()))
	r.flow.setParams(poolSize(r.s), r.cfg.maxInFlight, horizon, r.maxBatch)
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
	return 1
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
