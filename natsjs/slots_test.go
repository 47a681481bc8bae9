package natsjs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireSlots checks where the book's slots are, and that they add up to
// its bound.
func requireSlots(t *testing.T, b *slotBook, bound, free, owed, held, probing int) {
	t.Helper()
	f, o, h, p := b.counts()
	require.Equal(t, bound, f+o+h+p, "slots lost or made: free %d owed %d held %d probing %d", f, o, h, p)
	assert.Equal(t, []int{free, owed, held, probing}, []int{f, o, h, p}, "free, owed, held, probing")
}

func TestTheSlotBookKeepsEverySlotSomewhere(t *testing.T) {
	const bound = 8
	now := time.Now()
	later := now.Add(time.Second)
	b := newSlotBook(bound)

	// A plain pull takes free slots only, and no fewer than asked for.
	_, n := b.takeForPull(bound, 9, later)
	require.Zero(t, n, "a pull took fewer slots than its minimum")
	id1, n := b.takeForPull(5, 1, later)
	require.Equal(t, 5, n)
	requireSlots(t, b, bound, 3, 5, 0, 0)

	// Two messages come; the pull expires with three pending.
	require.True(t, b.delivered())
	require.True(t, b.delivered())
	b.ended(id1, 3)
	b.ended(id1, 3) // a second status for it changes nothing
	requireSlots(t, b, bound, 6, 0, 2, 0)

	// The two are handled: their acks carry a pull of their slots and
	// the free ones, at most 7; none is left over for a probe.
	id2, n, probe := b.carry(2, 7, later, later, nil)
	require.Equal(t, 7, n)
	require.Zero(t, probe)
	requireSlots(t, b, bound, 1, 7, 0, 0)

	// A pull may bring no more than it asked for: a message nobody owes
	// takes a free slot, and with none free it must go back.
	for range 7 {
		require.True(t, b.delivered())
	}
	require.True(t, b.delivered(), "a message for a pull given up on found no free slot")
	require.False(t, b.delivered(), "a message was taken beyond the bound")
	requireSlots(t, b, bound, 0, 0, 8, 0)
	b.ended(id2, 0) // served in full: its status, late, changes nothing
	requireSlots(t, b, bound, 0, 0, 8, 0)

	// Eight handled, a pull of at most 3 carried: five go to a probe.
	_, n, probe = b.carry(8, 3, later, later, nil)
	require.Equal(t, 3, n)
	require.NotZero(t, probe)
	requireSlots(t, b, bound, 0, 3, 0, 5)
	_, ok := b.endProbe(probe)
	require.True(t, ok)
	_, ok = b.endProbe(probe)
	require.False(t, ok, "a probe freed its slots twice")
	requireSlots(t, b, bound, 5, 3, 0, 0)

	// The pull of 3 brings one message and is never heard of again: once
	// it expired, the two still owed go to a probe, not to the free ones.
	require.True(t, b.delivered())
	lost, probe := b.sweep(now, true, later)
	require.Zero(t, lost, "a live pull was given up on")
	lost, probe = b.sweep(later.Add(time.Millisecond), true, later)
	require.Equal(t, 2, lost)
	require.NotZero(t, probe)
	requireSlots(t, b, bound, 5, 0, 1, 2)
	expired := b.expireProbes(later.Add(time.Millisecond), false)
	require.Len(t, expired, 1)
	requireSlots(t, b, bound, 7, 0, 1, 0)

	// A pull without a deadline (the fetch path's, which ends each pull
	// itself) is never given up on, however late.
	idF, n := b.takeForPull(2, 1, time.Time{})
	require.Equal(t, 2, n)
	lost, _ = b.sweep(later.Add(time.Hour), true, later)
	require.Zero(t, lost, "a pull without a deadline was given up on")
	requireSlots(t, b, bound, 5, 2, 1, 0)
	require.True(t, b.delivered())
	b.ended(idF, 1)
	requireSlots(t, b, bound, 6, 0, 2, 0)
	b.releaseHeld(1)

	// During a stop, acks go to a probe; a handed-back message's slot is
	// free at once.
	b.probeAcked(1, later, nil)
	requireSlots(t, b, bound, 7, 0, 0, 1)
	require.True(t, b.delivered())
	b.releaseHeld(1)
	requireSlots(t, b, bound, 7, 0, 0, 1)

	// Once stopped, no pull starts, not even one an ack would carry.
	b.stop()
	_, n = b.takeForPull(bound, 1, later)
	require.Zero(t, n, "a pull started after the stop")
	require.True(t, b.delivered()) // a late message still finds a slot
	_, n, _ = b.carry(1, bound, later, later, nil)
	require.Zero(t, n, "an ack carried a pull after the stop")
	requireSlots(t, b, bound, 6, 0, 1, 1)
}
