package limitertest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// Double is the tests' one stand-in for a limiter.Store: a spy and fault
// injector over a real store (a memory store unless given another). It
// records what reaches it and, when told, answers with the fault shapes a
// real store cannot produce on demand: a failure of one kind, a call held
// until released or until its caller gives up, a panic. The zero value is
// not usable (NewDouble). Safe for concurrent use; it also answers Ping
// (Pinger), as a store with a health check does.
type Double struct {
	Pinger
	inner limiter.Store

	mu          sync.Mutex
	fault       Fault
	batches     int
	requests    int
	last        []limiter.Request
	sawDeadline bool

	// Entered receives a value each time Evaluate is entered, when the
	// fault holds calls (Fault.Hold, Fault.Hang); buffered, so a call
	// never waits for a reader.
	Entered chan struct{}
	release chan struct{}
}

// Fault is how a Double answers. The zero value passes every batch to the
// store behind it.
type Fault struct {
	// Kind, when set, answers every request with a failure of this kind
	// (limiter.Unavailable, Indeterminate or Incompatible), with RetryAfter,
	// Category (a default per kind when empty) and Err.
	Kind       limiter.OutcomeKind
	RetryAfter time.Duration
	Category   string
	Err        error
	// Hold makes each call wait until Release (or its context ends) before
	// it is answered as above.
	Hold bool
	// Hang makes each call wait until its context ends, then answer
	// Indeterminate, as a store whose server stopped answering does.
	Hang bool
	// Panic, when set, panics with this value.
	Panic string
}

// NewDouble returns a Double over inner, or over a new memory store (of
// 1,000 entries, on clock when it is not nil) when inner is nil.
func NewDouble(t testing.TB, inner limiter.Store, clock limiter.Clock) *Double {
	t.Helper()
	if inner == nil {
		mem, err := memory.New(memory.Config{MaxEntries: 1000, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		inner = mem
	}
	return &Double{inner: inner, Entered: make(chan struct{}, 64), release: make(chan struct{})}
}

// Inner is the store behind the Double.
func (d *Double) Inner() limiter.Store { return d.inner }

// Set makes the Double answer by f from the next call on.
func (d *Double) Set(f Fault) {
	d.mu.Lock()
	d.fault = f
	d.mu.Unlock()
}

// Release lets every call held by Fault.Hold, now and later, go on.
func (d *Double) Release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.release:
	default:
		close(d.release)
	}
}

// Counts returns the batches and requests that reached the Double.
func (d *Double) Counts() (batches, requests int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.batches, d.requests
}

// Last returns a copy of the last batch that reached the Double, and
// whether its context carried a deadline.
func (d *Double) Last() ([]limiter.Request, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.last), d.sawDeadline
}

// Evaluate implements limiter.Store.
func (d *Double) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	d.mu.Lock()
	d.batches++
	d.requests += len(batch)
	d.last = append(d.last[:0], batch...)
	_, d.sawDeadline = ctx.Deadline()
	f := d.fault
	release := d.release
	d.mu.Unlock()
	if f.Panic != "" {
		panic(f.Panic)
	}
	if f.Hold || f.Hang {
		select {
		case d.Entered <- struct{}{}:
		default:
		}
	}
	switch {
	case f.Hang:
		<-ctx.Done()
		f.Kind, f.Err = limiter.Indeterminate, errors.Join(f.Err, ctx.Err())
	case f.Hold:
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	if f.Kind == 0 {
		d.inner.Evaluate(ctx, batch, out)
		return
	}
	for i := range batch {
		out[i] = failure(f)
	}
}

// failure is the outcome of fault f's kind.
func failure(f Fault) limiter.Outcome {
	switch f.Kind {
	case limiter.Unavailable:
		return limiter.UnavailableOutcome(f.RetryAfter, cmp(f.Category, limiter.CategoryNotConnected), f.Err)
	case limiter.Indeterminate:
		return limiter.IndeterminateOutcome(f.RetryAfter, f.Err)
	}
	return limiter.IncompatibleOutcome(cmp(f.Category, limiter.CategoryStateIncompatible), f.Err)
}

func cmp(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// Reset passes to the store behind the Double (an error when it cannot
// reset).
func (d *Double) Reset(ctx context.Context, states []limiter.Request) (int, error) {
	r, ok := d.inner.(limiter.Resetter)
	if !ok {
		return 0, errors.New("limitertest: the store behind the double cannot reset")
	}
	return r.Reset(ctx, states)
}

// ResetPolicy passes to the store behind the Double (an error when it
// cannot reset).
func (d *Double) ResetPolicy(ctx context.Context, id string, rev uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	r, ok := d.inner.(limiter.Resetter)
	if !ok {
		return limiter.PolicyReset{}, errors.New("limitertest: the store behind the double cannot reset")
	}
	return r.ResetPolicy(ctx, id, rev, b)
}

var (
	_ limiter.Store    = (*Double)(nil)
	_ limiter.Resetter = (*Double)(nil)
)
