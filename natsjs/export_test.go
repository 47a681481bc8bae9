package natsjs

import "time"

// SetSettleTimeout sets how long Run waits for an ack's confirmation,
// for a test process that must never see one time out.
func SetSettleTimeout(d time.Duration) { settleTimeout = d }
