package natsjs

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
)

// ackTokens reads the delivery count and the stream sequence of the
// server's two forms of ack subject as the client's own parser does, and
// nothing from what is no ack subject.
func TestAckTokensReadsTheDeliveryAndTheStreamSequenceOfAnAckSubject(t *testing.T) {
	cases := []struct {
		name, reply   string
		delivery, seq uint64
	}{
		{"without a domain", "$JS.ACK.JOBS.workers.3.41.97.1795841652981185990.12", 3, 41},
		{"with a domain and an account hash", "$JS.ACK.hub.ACCHASH.JOBS.workers.2.7.9.1795841652981185990.0.TOKEN", 2, 7},
		{"with a domain, without the last token", "$JS.ACK._.ACCHASH.JOBS.workers.1.5.5.1795841652981185990.3", 1, 5},
		{"no ack subject", "_INBOX.abc.p1", 0, 0},
		{"too few tokens", "$JS.ACK.JOBS.workers.3.41", 0, 0},
		{"not a number", "$JS.ACK.JOBS.workers.x.41.97.1795841652981185990.12", 0, 41},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			delivery, seq := ackTokens(tc.reply)
			assert.Equal(t, [2]uint64{tc.delivery, tc.seq}, [2]uint64{delivery, seq})
			if md, err := (&nats.Msg{Reply: tc.reply}).Metadata(); err == nil {
				assert.Equal(t, [2]uint64{md.NumDelivered, md.Sequence.Stream}, [2]uint64{delivery, seq}, "the client reads otherwise")
			}
		})
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { ackTokens(cases[1].reply) }), "ackTokens allocates")
}
