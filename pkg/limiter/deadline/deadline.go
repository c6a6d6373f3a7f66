// Package deadline gives request-path contexts whose deadlines share timers.
//
// context.WithDeadline costs, on every call, a timer armed and stopped, four
// allocations and a registration with (and removal from) the parent's set
// of children, and the request path makes two of them per Envoy request: a
// visible share of the server's CPU under load (docs/performance.md). A
// Wheel instead rounds each deadline down to a tick (one millisecond by
// default) and closes one channel per tick for every context due in it: one
// timer per tick in use, not per call, and one allocation per context.
//
// The price is documented on Context: the deadline fires up to one tick
// early, and cancelling the parent does not close Done (Err reports it).
// A tick's entry lives until its deadline, not until its call returns, so
// a Wheel holds up to (longest deadline ahead / tick) entries: callers
// bound their deadlines (pkg/rls and the Redis store: a minute at most,
// so at most 60,000 entries of a few hundred bytes each: a channel, a
// timer and a map slot).
//
// It lives beside the stores, not inside one of them, because two public
// packages bound store calls with it: pkg/rls (the answer reserve it keeps
// from the caller's deadline) and pkg/limiter/redis (the store's own
// Timeout). It imports nothing of the module, so any store or server may
// use it.
package deadline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// defaultTick is the resolution of a Wheel made with New(0).
const defaultTick = time.Millisecond

// closed is a channel closed from the start: the Done of a context whose
// deadline has passed when it is made. It is never written to.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Wheel hands out contexts with coarse deadlines. The zero value is not
// usable; make one with New. Safe for concurrent use.
type Wheel struct {
	tick time.Duration
	mu   sync.Mutex
	// due maps a tick number (Unix nanoseconds / tick) to the channel closed
	// when that tick starts. An entry is removed when its timer fires, so the
	// map holds only ticks still ahead: at most (longest deadline / tick).
	due map[int64]chan struct{}
	// last is the tick most recently added to due: the calls of one
	// moment share their tick, and find it here without taking mu.
	// Cleared when that tick fires.
	last atomic.Pointer[tickDone]
}

// tickDone is one entry of due.
type tickDone struct {
	n  int64
	ch chan struct{}
}

// New returns a Wheel of the given resolution (DefaultTick when tick ≤ 0).
func New(tick time.Duration) *Wheel {
	if tick <= 0 {
		tick = defaultTick
	}
	return &Wheel{tick: tick, due: make(map[int64]chan struct{})}
}

// Context returns a context with parent's values whose Deadline is d and
// whose Done closes at the start of d's tick: between one tick before d and
// d (plus the timer's own latency, as for context.WithDeadline). now is the
// caller's clock reading; when d's tick has started by now, Done is already
// closed.
//
// Cancelling parent does not close Done: Err reports parent's error as soon
// as it has one, and Done closes at the deadline anyway. Callers that must
// react to a cancelled parent at once should use context.WithDeadline. There
// is no cancel function: nothing is held after the deadline.
//
// When parent's own deadline is earlier than d, parent itself is returned.
func (w *Wheel) Context(parent context.Context, now, d time.Time) context.Context {
	if pd, ok := parent.Deadline(); ok && !pd.After(d) {
		return parent
	}
	n := d.UnixNano() / int64(w.tick)
	if n <= now.UnixNano()/int64(w.tick) {
		return &ctx{Context: parent, deadline: d, done: closed}
	}
	if t := w.last.Load(); t != nil && t.n == n {
		return &ctx{Context: parent, deadline: d, done: t.ch}
	}
	w.mu.Lock()
	ch := w.due[n]
	if ch == nil {
		ch = make(chan struct{})
		w.due[n] = ch
		w.last.Store(&tickDone{n: n, ch: ch})
		time.AfterFunc(time.Duration(n*int64(w.tick)-now.UnixNano()), func() { w.fire(n) })
	}
	w.mu.Unlock()
	return &ctx{Context: parent, deadline: d, done: ch}
}

// fire closes tick n's channel and forgets it.
func (w *Wheel) fire(n int64) {
	w.mu.Lock()
	ch := w.due[n]
	delete(w.due, n)
	if t := w.last.Load(); t != nil && t.n == n {
		w.last.Store(nil)
	}
	w.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// ctx is a context of a Wheel: parent's values and error, its own deadline
// and Done.
type ctx struct {
	context.Context
	deadline time.Time
	done     <-chan struct{}
}

func (c *ctx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *ctx) Done() <-chan struct{} { return c.done }

// Err is parent's error when it has one (a cancelled request), else
// context.DeadlineExceeded once Done is closed, else nil.
func (c *ctx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Cancelled returns a channel that closes when c's caller gives up: the
// Done of the first context under c that is not a Wheel's (the caller's
// own, which closes when it is cancelled or reaches its own deadline). A
// Wheel's Done does not follow its parent's cancellation; a caller that
// waits for something it may drop on cancellation (a queue) also waits on
// this. For a context that is not a Wheel's it is c.Done().
func Cancelled(c context.Context) <-chan struct{} {
	for {
		w, ok := c.(*ctx)
		if !ok {
			return c.Done()
		}
		c = w.Context
	}
}
