package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestSuite runs the store suite (internal/limitertest) on the memory
// store: the batch table, the timed cases on the store's injected clock,
// resets and the lease scripts, each part on a store of its own.
func TestSuite(t *testing.T) {
	limitertest.RunSuite(t, limitertest.Suite{
		Store: func(t *testing.T) limiter.Store { return newStore(t, memory.Config{MaxEntries: 1 << 16}) },
		Timed: func(t *testing.T, clock *limitertest.Clock) limiter.Store {
			return newStore(t, memory.Config{Clock: clock})
		},
		Leases:       true,
		Reservations: true,
	}, limitertest.Config{Prefix: "mem"})
}

// TestCalendarMonthOverflow: the calendar month case holds for subjects
// that spill into the overflow sketch (16 entries, one a shard, for 40
// subjects), which rolls over at the same boundary; the entries expire at
// the last period's end plus the grace, not before.
func TestCalendarMonthOverflow(t *testing.T) {
	tc := limitertest.CalendarMonth(t)
	clock := limitertest.NewClock(tc.Start)
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 16, Shards: 16})
	limitertest.RunCase(t, s, limitertest.Config{Prefix: "mem", Clock: clock}, tc)
	if s.Sketches() == 0 {
		t.Fatal("no subject spilled into the overflow sketch")
	}
	end := tc.Steps[len(tc.Steps)-1].Want[0].Reset
	grace := time.Duration(limitertest.Policy(t, tc.Policies[0]).CleanupGraceMillis()) * time.Millisecond
	held := s.Len()
	if n := s.Sweep(end.Add(grace - time.Millisecond)); n != 0 || held == 0 {
		t.Fatalf("swept %d of %d entries before the period's end + grace", n, held)
	}
	if n := s.Sweep(end.Add(grace + time.Millisecond)); n != held || s.Sketches() != 0 {
		t.Fatalf("after the period's end + grace: swept %d of %d, %d sketches left", n, held, s.Sketches())
	}
}

// TestPenaltyStateExpires: the store keeps a subject in its penalty box
// past the window's own expiry and drops it once the block, its decay and
// the grace are over.
func TestPenaltyStateExpires(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock})
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "pen", Algorithm: limiter.FixedWindow,
		Params:  limiter.FixedWindowParams{Limit: 2, Window: time.Second},
		Penalty: limiter.Penalty{Duration: 10 * time.Second, MaxDuration: 40 * time.Second, Decay: time.Minute}})
	r := limiter.Request{Policy: p, Subject: subject(1), Cost: 1}
	for i, allowed := range []bool{true, true, false} {
		if o := eval1(s, context.Background(), r); o.Kind != limiter.Evaluated || o.Decision.Allowed != allowed {
			t.Fatalf("request %d: %+v, want allowed %v", i, o, allowed)
		}
	}
	// The window's state alone expires after 1 s + the grace.
	clock.Advance(5 * time.Second)
	if n := s.SweepExpired(); n != 0 || s.Len() != 1 {
		t.Fatalf("swept %d, %d left: want the entry in its penalty box kept", n, s.Len())
	}
	gone := time.UnixMilli(t0).Add(10*time.Second + time.Minute + time.Duration(p.CleanupGraceMillis())*time.Millisecond)
	if n := s.Sweep(gone.Add(-time.Millisecond)); n != 0 {
		t.Fatalf("swept %d before the block, its decay and the grace were over", n)
	}
	if n := s.Sweep(gone.Add(time.Millisecond)); n != 1 || s.Len() != 0 {
		t.Fatalf("swept %d, %d left: want the entry gone after its block, decay and grace", n, s.Len())
	}
}
