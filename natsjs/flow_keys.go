package natsjs

import (
	"cmp"
	"slices"
)

// Key order (WithKey): each message goes to the pool as a task of its
// key (SubmitKey), so that the pool runs a key's tasks one at a time, in
// the order it got them, beside the tasks of other keys and other work.
// No runner carries them: the puller submits the messages in the order
// they came, and a message's task, once the pool starts it, runs it,
// unless the stop took it back first. What the flow holds is sized as for
// runners, as if every worker of the pool ran one (see target), but no
// ticket proves a worker free first: a pool busy with other work holds
// the messages in its queue.

// setKeyed makes f a flow of keyed tasks.
func (f *flow) setKeyed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keyed = true
	f.out = make(map[*message]bool)
	f.keys = make(map[string]int)
}

// nextToSubmit returns the oldest message that waits to be submitted; nil
// if there is none, or the run stops. The caller gives it its key, then
// submits it (submitted) or puts it back (unsubmit).
func (f *flow) nextToSubmit() *message {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping || f.queued() == 0 {
		return nil
	}
	return f.queue[f.head]
}

// submitting records that m, the oldest message that waits to be
// submitted, of key, is being submitted: it waits in the pool, for its
// key or a worker, until its task starts. It returns false if the stop
// took m meanwhile.
func (f *flow) submitting(m *message, key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.queued() == 0 || f.queue[f.head] != m {
		return false
	}
	f.queue[f.head] = nil
	f.head++
	if f.head == len(f.queue) {
		f.queue, f.head = f.queue[:0], 0
	}
	m.key = key
	f.out[m] = false
	f.keys[key]++
	f.waiting++
	return true
}

// behindKeys returns how many of the messages in the pool wait for their
// key: all of a key's but the first. Call with mu held.
func (f *flow) behindKeys() int { return len(f.out) - len(f.keys) }

// forget takes m, a message of a key, off the keys. Call with mu held.
func (f *flow) forget(m *message) {
	if _, ok := f.out[m]; !ok {
		return
	}
	delete(f.out, m)
	if f.keys[m.key]--; f.keys[m.key] == 0 {
		delete(f.keys, m.key)
	}
}

// unsubmit takes back m, which the pool refused: it is again the first to
// be submitted, unless the stop took it meanwhile.
func (f *flow) unsubmit(m *message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if started, ok := f.out[m]; !ok || started {
		return
	}
	f.forget(m)
	f.waiting--
	if f.head > 0 {
		f.head--
		f.queue[f.head] = m
	} else {
		f.queue = slices.Insert(f.queue, 0, m)
	}
}

// startKeyed records that the task of m started, and counts m running. It
// returns false if the stop took m back, or takes nothing more: the task
// must return at once.
func (f *flow) startKeyed(m *message) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if started, ok := f.out[m]; !ok || started || f.stopping {
		return false
	}
	f.out[m] = true
	f.waiting--
	f.running++
	f.signalIfDueLocked()
	return true
}

// takeWaiting adds to q, the queued messages, those submitted whose task
// did not start, all in the order they came, and forgets them: their
// tasks will find them gone. Call with mu held.
func (f *flow) takeWaiting(q []*message) []*message {
	if !f.keyed {
		return q
	}
	for m, started := range f.out {
		if !started {
			f.forget(m)
			q = append(q, m)
		}
	}
	f.waiting = 0
	slices.SortFunc(q, func(a, b *message) int { return cmp.Compare(a.n, b.n) })
	return q
}
