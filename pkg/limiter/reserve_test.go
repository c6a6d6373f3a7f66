package limiter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestReserveSpec: which policies may reserve, and the bounds of a
// reservation's TTL and estimate.
func TestReserveSpec(t *testing.T) {
	fw := func(r limiter.Reserve) limiter.PolicySpec {
		return limiter.PolicySpec{ID: "budget", Algorithm: limiter.FixedWindow,
			Params: limiter.FixedWindowParams{Limit: 20000, Window: time.Hour}, Reserve: r}
	}
	with := func(spec limiter.PolicySpec, f func(*limiter.PolicySpec)) limiter.PolicySpec { f(&spec); return spec }
	for _, tc := range []struct {
		name   string
		spec   limiter.PolicySpec
		reason string // a part of the refusal; "" for valid
	}{
		{"the request's cost", fw(limiter.Reserve{TTL: 10 * time.Minute}), ""},
		{"a fixed estimate", fw(limiter.Reserve{TTL: 10 * time.Minute, Estimate: 500}), ""},
		{"the largest TTL", fw(limiter.Reserve{TTL: limiter.MaxLeaseTTL}), ""},
		{"token bucket", with(fw(limiter.Reserve{TTL: time.Minute}), func(s *limiter.PolicySpec) {
			s.Algorithm, s.Params = limiter.TokenBucket, limiter.TokenBucketParams{Capacity: 100, RefillAmount: 100, RefillPeriod: time.Minute}
		}), ""},
		{"gcra", with(fw(limiter.Reserve{TTL: time.Minute}), func(s *limiter.PolicySpec) {
			s.Algorithm, s.Params = limiter.GCRA, limiter.GCRAParams{Burst: 100, Limit: 100, Period: time.Minute}
		}), ""},
		{"sliding window", with(fw(limiter.Reserve{TTL: time.Minute}), func(s *limiter.PolicySpec) {
			s.Algorithm, s.Params = limiter.SlidingWindow, limiter.SlidingWindowParams{Limit: 100, Window: time.Minute}
		}), ""},
		{"an estimate without a TTL", fw(limiter.Reserve{Estimate: 5}), "needs a ttl"},
		{"a TTL of a fraction of a ms", fw(limiter.Reserve{TTL: 1500 * time.Microsecond}), "whole milliseconds"},
		{"a TTL past the bound", fw(limiter.Reserve{TTL: limiter.MaxLeaseTTL + time.Millisecond}), "whole milliseconds"},
		{"a negative estimate", fw(limiter.Reserve{TTL: time.Minute, Estimate: -1}), "estimate"},
		{"an estimate above the max cost", with(fw(limiter.Reserve{TTL: time.Minute, Estimate: 600}), func(s *limiter.PolicySpec) { s.MaxCost = 500 }), "estimate"},
		{"sliding log", with(fw(limiter.Reserve{TTL: time.Minute}), func(s *limiter.PolicySpec) {
			s.Algorithm, s.Params = limiter.SlidingLog, limiter.SlidingLogParams{Limit: 10, Window: time.Minute}
		}), "sliding_log"},
		{"a penalty box", with(fw(limiter.Reserve{TTL: time.Minute}), func(s *limiter.PolicySpec) {
			s.Penalty = limiter.Penalty{Duration: time.Second}
		}), "penalty"},
		{"concurrency", with(fw(limiter.Reserve{TTL: time.Minute}), func(s *limiter.PolicySpec) {
			s.Algorithm, s.Params = limiter.Concurrency, limiter.ConcurrencyParams{Limit: 4, LeaseTTL: time.Minute}
		}), "concurrency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := limiter.NewPolicy(tc.spec)
			if tc.reason == "" {
				if err != nil || !p.Reserve().On() {
					t.Fatalf("NewPolicy: %v, want a reserving policy", err)
				}
				return
			}
			var fe *limiter.FieldError
			if !errors.As(err, &fe) || fe.Field != "reserve" || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("NewPolicy: %v, want a refusal of reserve naming %q", err, tc.reason)
			}
		})
	}
}

// TestReserveRequests: a reserving policy takes and settles (a settle of
// 0 actual usage included); a return, or a release on a plain rate policy,
// is refused.
func TestReserveRequests(t *testing.T) {
	budget, err := limiter.NewPolicy(limiter.PolicySpec{ID: "budget", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}, Reserve: limiter.Reserve{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := limiter.NewPolicy(limiter.PolicySpec{ID: "plain", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		req   limiter.Request
		field string // "" for valid
	}{
		{"reserve", limiter.Request{Policy: budget, Cost: 50}, ""},
		{"settle", limiter.Request{Policy: budget, Cost: 70, Lease: limiter.LeaseRelease, LeaseAt: 1}, ""},
		{"settle of no usage", limiter.Request{Policy: budget, Cost: 0, Lease: limiter.LeaseRelease, LeaseAt: 1}, ""},
		{"a charge without a reservation", limiter.Request{Policy: budget, Cost: 3, Lease: limiter.LeaseRelease}, ""},
		{"reserve of nothing", limiter.Request{Policy: budget, Cost: 0}, "cost"},
		{"return", limiter.Request{Policy: budget, Cost: 1, Lease: limiter.LeaseReturn, LeaseAt: 1}, "lease"},
		{"release on a plain policy", limiter.Request{Policy: plain, Cost: 1, Lease: limiter.LeaseRelease}, "lease"},
		{"no usage on a plain policy", limiter.Request{Policy: plain, Cost: 0}, "cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			var fe *limiter.FieldError
			if tc.field == "" && err != nil || tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field) {
				t.Fatalf("Validate: %v, want field %q", err, tc.field)
			}
		})
	}
}

// TestReserveBatchRule: a settle is recorded whatever its batch decides
// (never demoted to a check) and never blocks it, even denied; a reserve
// blocks and is taken only when its batch commits, on a charge-always
// policy too.
func TestReserveBatchRule(t *testing.T) {
	budget, err := limiter.NewPolicy(limiter.PolicySpec{ID: "budget", Algorithm: limiter.FixedWindow, Charge: limiter.ChargeAlways,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}, Reserve: limiter.Reserve{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	reserve := limiter.Request{Policy: budget, Cost: 5}
	settle := limiter.Request{Policy: budget, Cost: 5, Lease: limiter.LeaseRelease, LeaseAt: 1}
	if reserve.Settles() || reserve.Charges() || !settle.Settles() || !settle.Charges() {
		t.Fatalf("reserve settles %v charges %v; settle settles %v charges %v", reserve.Settles(), reserve.Charges(), settle.Settles(), settle.Charges())
	}
	if check := (limiter.Request{Policy: budget, Cost: 5, Lease: limiter.LeaseRelease, Role: limiter.RoleCheck}); check.Charges() {
		t.Fatal("a settle asked as a check charges")
	}
	denied := limiter.EvaluatedOutcome(limiter.Decision{})
	allowed := limiter.EvaluatedOutcome(limiter.Decision{Allowed: true})
	if !limiter.Commits([]limiter.Request{reserve, settle}, []limiter.Outcome{allowed, denied}) {
		t.Fatal("a denied settle blocked its batch")
	}
	if limiter.Commits([]limiter.Request{reserve, settle}, []limiter.Outcome{denied, allowed}) {
		t.Fatal("a denied reserve did not block its batch")
	}
}
