package limitertest

import (
	"sync/atomic"
	"time"
)

// Clock is a limiter.Clock that tests set and advance, safe for concurrent
// use. It tells time in UTC with nanosecond precision.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// Now returns the time set.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Set moves the clock to t (backwards too).
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock by d (backwards when d < 0) and returns the new
// time.
func (c *Clock) Advance(d time.Duration) time.Time {
	return time.Unix(0, c.ns.Add(int64(d))).UTC()
}
