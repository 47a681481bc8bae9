package natsjs

import "time"

// WithSettleTimeout sets how long Run waits for the server to confirm a
// settling, and for a copy's publication, for a test that must see one
// time out quickly, or never.
func WithSettleTimeout(d time.Duration) Option {
	return func(c *config) { c.settleTimeout = d }
}

// WithAhead makes each runner have at least n messages waiting for it,
// whatever the handlers' speed, for a test that needs messages queued: Run
// tops them up as soon as one is missing, rather than once half are.
func WithAhead(n int) Option {
	return func(c *config) { c.minAhead = n }
}
