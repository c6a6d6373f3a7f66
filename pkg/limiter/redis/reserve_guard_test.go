package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestReservationsRefused: the rate program holds no reservations, so a
// reserving policy's requests are answered incompatible (the failure mode
// answers them) instead of being decided as plain requests; the batch's
// other limits are decided.
func TestReservationsRefused(t *testing.T) {
	s := newStore(t, Config{Addrs: []string{redistest.Standalone(t).Addr()}})
	budget := limitertest.Policy(t, limiter.PolicySpec{ID: limitertest.Prefix() + ".budget", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}, Reserve: limiter.Reserve{TTL: time.Minute}})
	plain := limitertest.Policy(t, limiter.PolicySpec{ID: limitertest.Prefix() + ".plain", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}})
	subject := limitertest.Subject(limitertest.Prefix())
	batch := []limiter.Request{{Policy: budget, Subject: subject, Cost: 10}, {Policy: plain, Subject: subject, Cost: 1}}
	out := make([]limiter.Outcome, len(batch))
	s.Evaluate(context.Background(), batch, out)
	if out[0].Kind != limiter.Incompatible || !errors.Is(out[0].Err, errReservations) {
		t.Errorf("reserve: %s %v, want incompatible: reservations are the memory store's", out[0].Kind, out[0].Err)
	}
	if out[1].Kind != limiter.Evaluated || !out[1].Decision.Allowed {
		t.Errorf("the plain limit beside it: %s %+v", out[1].Kind, out[1].Decision)
	}
}
