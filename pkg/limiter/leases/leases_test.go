package leases_test

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
)

// TestLeasesOnMemory: the lease scripts every store runs, on the memory
// store.
func TestLeasesOnMemory(t *testing.T) {
	limitertest.RunLeases(t, limitertest.NewDouble(t, nil, nil).Inner(), limitertest.Config{Prefix: "mem"})
}

// TestBatchWithoutLeasesGoesDownAsIs: a batch of rate requests reaches the
// store below as one batch, unchanged.
func TestBatchWithoutLeasesGoesDownAsIs(t *testing.T) {
	d := limitertest.NewDouble(t, nil, nil)
	s := leases.New(d, d)
	rp := limitertest.Policy(t, limiter.PolicySpec{ID: "rate", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 3, Window: time.Minute}})
	batch := []limiter.Request{{Policy: rp, Subject: limitertest.Subject("a"), Cost: 1}, {Policy: rp, Subject: limitertest.Subject("b"), Cost: 2}}
	out := make([]limiter.Outcome, len(batch))
	s.Evaluate(context.Background(), batch, out)
	if b, r := d.Counts(); b != 1 || r != 2 {
		t.Fatalf("store saw %d batches of %d requests, want 1 of 2", b, r)
	}
	for i, o := range out {
		if o.Kind != limiter.Evaluated || !o.Decision.Consumed {
			t.Errorf("request %d: %s consumed %t, want evaluated and consumed", i, o.Kind, o.Decision.Consumed)
		}
	}
}
