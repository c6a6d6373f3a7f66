package limitertest

import (
	"context"
	"sync"
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

// Pinger is a store's Ping whose answer tests set: a store outage without a
// store to break. The zero value answers nil (reachable); it is safe for
// concurrent use.
type Pinger struct {
	mu  sync.Mutex
	err error
}

// Ping answers the error set last.
func (p *Pinger) Ping(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// SetPing makes Ping answer err (nil: reachable) from now on.
func (p *Pinger) SetPing(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}
