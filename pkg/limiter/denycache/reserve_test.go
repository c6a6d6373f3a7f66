package denycache

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestReservationsNotCached: a reserving limit's denial is not repeated
// from the cache, and its settles always reach the store: a settle gives
// back what a reservation did not use, so a denial does not hold until
// its retry time, and a settle answered locally would be lost.
func TestReservationsNotCached(t *testing.T) {
	e := newEnv(t, 0)
	spec := specOf("budget", limiter.FixedWindow, 2, time.Hour)
	spec.Reserve = limiter.Reserve{TTL: time.Minute}
	p, s := limitertest.Policy(t, spec), subject("a")
	first := e.eval(limiter.Request{Policy: p, Subject: s, Cost: 2})[0]
	if !first.Decision.Consumed || first.Decision.HoldAt.IsZero() {
		t.Fatalf("reserve: %+v", first)
	}
	for i := range 2 {
		if o := e.eval(limiter.Request{Policy: p, Subject: s, Cost: 1})[0]; o.Decision.Allowed || o.Decision.Source != limiter.SourceMemory {
			t.Fatalf("reserve %d past the budget: allowed %v, source %v; want a denial of the store", i, o.Decision.Allowed, o.Decision.Source)
		}
	}
	before := e.storeReqs()
	e.eval(limiter.Request{Policy: p, Subject: s, Cost: 0, Lease: limiter.LeaseRelease, LeaseAt: first.Decision.HoldAt.UnixMilli()})
	if e.storeReqs() == before {
		t.Fatal("the settle did not reach the store")
	}
	if o := e.eval(limiter.Request{Policy: p, Subject: s, Cost: 1})[0]; !o.Decision.Allowed {
		t.Fatalf("reserve after the settle gave all back: %+v", o.Decision)
	}
}
