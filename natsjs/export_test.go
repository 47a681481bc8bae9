package natsjs

import "time"

// SetSettleTimeout sets how long Run waits for an ack's confirmation,
// for a test process that must never see one time out.
func SetSettleTimeout(d time.Duration) { settleTimeout = d }

// SetNoCarry makes the acker confirm each batch of acks before it frees
// their slots, rather than carry the next pull in the last ack, for a
// benchmark that measures what carrying gives.
func SetNoCarry(on bool) { noCarry = on }
