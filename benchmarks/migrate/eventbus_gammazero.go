package migrate

import (
	"fmt"
	"sync"

	gammazero "github.com/gammazero/workerpool"
)

// An Event is what the buses carry.
type Event struct {
	Topic string
	N     int
}

// gzBus is an event bus on gammazero/workerpool, before the migration.
// Each subscriber has a pool of one worker, so that it gets its events one
// at a time, in the order they were published, and a slow subscriber holds
// up no other. Publish counts each delivery in pending until its handler
// has run; Wait waits for them all.
type gzBus struct {
	mu      sync.Mutex
	subs    map[string][]*gzSubscriber
	pending sync.WaitGroup
}

type gzSubscriber struct {
	wp     *gammazero.WorkerPool
	handle func(Event)
}

func newGzBus() *gzBus { return &gzBus{subs: map[string][]*gzSubscriber{}} }

// Subscribe calls handle with every event published on topic from now on.
func (b *gzBus) Subscribe(topic string, handle func(Event)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[topic] = append(b.subs[topic], &gzSubscriber{wp: gammazero.New(1), handle: handle})
}

// Publish delivers e to every subscriber of its topic, and returns how many
// of them refused it because they were closed.
func (b *gzBus) Publish(e Event) (refused int) {
	b.mu.Lock()
	subs := b.subs[e.Topic]
	b.mu.Unlock()
	for _, s := range subs {
		b.pending.Add(1)
		if err := s.deliver(func() { defer b.pending.Done(); s.handle(e) }); err != nil {
			b.pending.Done()
			refused++
		}
	}
	return refused
}

// deliver hands fn to the subscriber's pool. gammazero's Submit panics on
// a stopped pool: deliver turns the panic into an error.
func (s *gzSubscriber) deliver(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("subscriber closed: %v", r)
		}
	}()
	s.wp.Submit(fn)
	return nil
}

// Close stops every subscriber once it has handled the events published so
// far. Later events are refused.
func (b *gzBus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, subs := range b.subs {
		for _, s := range subs {
			s.wp.StopWait()
		}
	}
}

// Wait waits until every event delivered has been handled.
func (b *gzBus) Wait() { b.pending.Wait() }
