package migrate

import (
	"fmt"
	"sync"

	"github.com/dispatchkit/workerpool"
)

// bus is gzBus migrated to workerpool: the type renamed, and deliver
// returning Submit's error instead of recovering a panic.
type bus struct {
	mu      sync.Mutex
	subs    map[string][]*subscriber
	pending sync.WaitGroup

	// asBefore makes Publish deliver with deliverAsBefore: the migration
	// that fixed only what the compiler reported. For the test that shows
	// why that is not enough.
	asBefore bool
}

type subscriber struct {
	p      *workerpool.Pool // was *gammazero.WorkerPool
	handle func(Event)
}

func newBus() *bus { return &bus{subs: map[string][]*subscriber{}} }

// Subscribe calls handle with every event published on topic from now on.
func (b *bus) Subscribe(topic string, handle func(Event)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[topic] = append(b.subs[topic], &subscriber{p: workerpool.New(1), handle: handle})
}

// Publish delivers e to every subscriber of its topic, and returns how many
// of them refused it because they were closed.
func (b *bus) Publish(e Event) (refused int) {
	b.mu.Lock()
	subs := b.subs[e.Topic]
	b.mu.Unlock()
	for _, s := range subs {
		deliver := s.deliver
		if b.asBefore {
			deliver = s.deliverAsBefore
		}
		b.pending.Add(1)
		if err := deliver(func() { defer b.pending.Done(); s.handle(e) }); err != nil {
			b.pending.Done()
			refused++
		}
	}
	return refused
}

// deliver hands fn to the subscriber's pool, and returns workerpool's
// error: ErrStopped once the subscriber is closed.
func (s *subscriber) deliver(fn func()) error {
	return s.p.Submit(fn)
}

// deliverAsBefore is gammazero's deliver with only the type renamed. It
// compiles, but Submit no longer panics on a stopped pool: it returns
// ErrStopped, which this drops, so deliver returns nil for a task that
// never runs, and Wait waits for it for ever.
func (s *subscriber) deliverAsBefore(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("subscriber closed: %v", r)
		}
	}()
	s.p.Submit(fn) //nolint:errcheck // the mistake this shows
	return nil
}

// Close stops every subscriber once it has handled the events published so
// far. Later events are refused.
func (b *bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, subs := range b.subs {
		for _, s := range subs {
			s.p.StopWait()
		}
	}
}

// Wait waits until every event delivered has been handled.
func (b *bus) Wait() { b.pending.Wait() }
