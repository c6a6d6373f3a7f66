package memory_test

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestLeases runs a crashed holder on the injected clock, and three
// "replicas" (goroutine groups) on one store: never more than the limit in
// flight. TestSuite runs the lease scripts.
func TestLeases(t *testing.T) {
	t.Run("crashed holder", func(t *testing.T) {
		clock := limitertest.NewClock(time.UnixMilli(1_700_000_000_000))
		s := newStore(t, memory.Config{Clock: clock})
		p := limitertest.LeasePolicy(t, "mem.crash", 1, time.Minute)
		limitertest.LeaseExpiry(t, s, p, limitertest.Subject("crash"), clock.Now, func(d time.Duration) { clock.Advance(d) })
	})
	t.Run("in flight", func(t *testing.T) {
		s := newStore(t, memory.Config{})
		p := limitertest.LeasePolicy(t, "mem.inflight", 3, time.Hour)
		limitertest.LeaseExactness(t, []limiter.Store{s, s, s}, p, limitertest.Subject("inflight"), 4, 200)
	})
}

// TestLeaseCapacity: lease sets are bounded by MaxEntries; a new set past
// it is refused for capacity (the failure mode answers), an expired one
// makes room.
func TestLeaseCapacity(t *testing.T) {
	clock := limitertest.NewClock(time.UnixMilli(1_700_000_000_000))
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 16, Shards: 1})
	p := limitertest.LeasePolicy(t, "mem.cap", 1, time.Second)
	out := make([]limiter.Outcome, 1)
	for i := range 17 {
		s.Evaluate(t.Context(), []limiter.Request{{Policy: p, Subject: limitertest.Subject(string(rune('a' + i))), Cost: 1}}, out)
		if want := i < 16; (out[0].Kind == limiter.Evaluated) != want {
			t.Fatalf("set %d: %s %v", i, out[0].Kind, out[0].Err)
		}
	}
	if out[0].Category != limiter.CategoryCapacity {
		t.Fatalf("17th set: %s %s", out[0].Kind, out[0].Category)
	}
	clock.Advance(2 * time.Second)
	s.Evaluate(t.Context(), []limiter.Request{{Policy: p, Subject: limitertest.Subject("late"), Cost: 1}}, out)
	if out[0].Kind != limiter.Evaluated || !out[0].Decision.Consumed {
		t.Fatalf("after every lease expired: %s %v", out[0].Kind, out[0].Err)
	}
}

// TestLeaseReset: a subject reset and a policy reset drop lease sets.
func TestLeaseReset(t *testing.T) {
	s := newStore(t, memory.Config{})
	p := limitertest.LeasePolicy(t, "mem.reset", 1, time.Hour)
	take := func(subject string) bool {
		out := make([]limiter.Outcome, 1)
		s.Evaluate(t.Context(), []limiter.Request{{Policy: p, Subject: limitertest.Subject(subject), Cost: 1}}, out)
		return out[0].Decision.Consumed
	}
	if !take("a") || !take("b") || take("a") {
		t.Fatal("one lease each, then full")
	}
	if n, err := s.Reset(t.Context(), []limiter.Request{{Policy: p, Subject: limitertest.Subject("a")}}); n != 1 || err != nil {
		t.Fatalf("Reset: %d %v", n, err)
	}
	if !take("a") || take("b") {
		t.Fatal("after the subject reset: a free, b still held")
	}
	res, err := s.ResetPolicy(t.Context(), p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 100})
	if err != nil || res.Deleted != 2 {
		t.Fatalf("ResetPolicy: %+v %v", res, err)
	}
	if !take("b") {
		t.Fatal("after the policy reset: b free")
	}
}
