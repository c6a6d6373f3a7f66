package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestOverflowSketchKeepsCharges: a subject decided by its policy's
// overflow sketch (the table is full) keeps a charge's debt: after a charge
// of 9 on a limit of 5 a second, one more unit is denied (a bucket's or
// GCRA's still one unit's refill later).
func TestOverflowSketchKeepsCharges(t *testing.T) {
	for _, p := range algorithmPolicies(t, "charge", limiter.FailClosed, 5, time.Second) {
		if p.Penalty().On() {
			continue // charge: always takes no penalty box
		}
		spec := p.Spec()
		spec.Charge, spec.MaxCost = limiter.ChargeAlways, 0
		p := limitertest.Policy(t, spec)
		t.Run(p.ID(), func(t *testing.T) {
			clock := newClock(t0)
			s := newStore(t, memory.Config{Clock: clock, MaxEntries: 2, Shards: 1})
			ctx := context.Background()
			eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(0), Cost: 1}) // fills the table
			overflow := 0
			for u := uint64(1); u <= 20; u++ {
				o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(u), Cost: 9})
				if d := o.Decision; o.Kind != limiter.Evaluated || d.Allowed || !d.Consumed {
					t.Fatalf("subject %d: the charge of 9: %+v", u, o)
				}
				if o.Decision.Source == limiter.SourceMemoryOverflow {
					overflow++
				}
				// A bucket or GCRA, one unit's refill later (without its
				// debt it would hold a token again): still denied.
				if p.SketchWindows() == 0 {
					clock.Advance(200 * time.Millisecond)
				}
				probe := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(u), Cost: 1, Role: limiter.RoleProbe})
				if probe.Kind != limiter.Evaluated || probe.Decision.Allowed {
					t.Fatalf("subject %d: one unit 200 ms after the charge: %+v", u, probe)
				}
			}
			if overflow == 0 {
				t.Fatal("no charge was decided by the overflow sketch")
			}
		})
	}
}
