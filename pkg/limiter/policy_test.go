package limiter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func TestNewPolicy(t *testing.T) {
	fw := limiter.FixedWindowParams{Limit: 10, Window: time.Second}
	ok := limiter.PolicySpec{ID: "api.v1/users:read-x_y", Algorithm: limiter.FixedWindow, Params: fw}
	with := func(f func(*limiter.PolicySpec)) limiter.PolicySpec { s := ok; f(&s); return s }
	tb := func(capacity, amount int64, period time.Duration) limiter.PolicySpec {
		return limiter.PolicySpec{ID: "tb", Algorithm: limiter.TokenBucket,
			Params: limiter.TokenBucketParams{Capacity: capacity, RefillAmount: amount, RefillPeriod: period}}
	}
	sw := func(limit int64, window time.Duration) limiter.PolicySpec {
		return limiter.PolicySpec{ID: "sw", Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: limit, Window: window}}
	}
	const tenYears = 10 * 366 * 24 * time.Hour
	for _, tc := range []struct {
		name    string
		spec    limiter.PolicySpec
		wantErr string // the field the error names; "" for valid
	}{
		{"valid fixed window", ok, ""},
		{"valid sliding window", sw(10, time.Minute), ""},
		{"valid token bucket", tb(100, 10, time.Second), ""},
		{"valid zero limit", with(func(s *limiter.PolicySpec) { s.Params = limiter.FixedWindowParams{Window: time.Second} }), ""},
		{"valid limit at 2^53-1", with(func(s *limiter.PolicySpec) {
			s.Params = limiter.FixedWindowParams{Limit: limiter.MaxSafeInteger, Window: time.Second}
		}), ""},
		{"valid sliding limit at bound", sw(limiter.MaxSafeInteger/limiter.SlidingScale, time.Second), ""},
		{"valid bucket capacity*period at bound", tb(limiter.MaxSafeInteger-1_000_000, 1_000_000, time.Millisecond), ""},
		{"valid window of ten years", with(func(s *limiter.PolicySpec) { s.Params = limiter.FixedWindowParams{Limit: 1, Window: tenYears} }), ""},
		{"valid open, shadow", with(func(s *limiter.PolicySpec) { s.FailureMode, s.Shadow = limiter.FailOpen, true }), ""},
		{"valid group", with(func(s *limiter.PolicySpec) { s.Group = "edge:override" }), ""},

		{"empty id", with(func(s *limiter.PolicySpec) { s.ID = "" }), "id"},
		{"long id", with(func(s *limiter.PolicySpec) { s.ID = strings.Repeat("a", 129) }), "id"},
		{"upper-case id", with(func(s *limiter.PolicySpec) { s.ID = "API" }), "id"},
		{"id with space", with(func(s *limiter.PolicySpec) { s.ID = "a b" }), "id"},
		{"group with space", with(func(s *limiter.PolicySpec) { s.Group = "a b" }), "group"},
		{"long group", with(func(s *limiter.PolicySpec) { s.Group = strings.Repeat("a", 129) }), "group"},
		{"no params", with(func(s *limiter.PolicySpec) { s.Params = nil }), "params"},
		{"params of another algorithm", with(func(s *limiter.PolicySpec) { s.Algorithm = limiter.TokenBucket }), "params"},
		{"unknown algorithm", with(func(s *limiter.PolicySpec) { s.Algorithm = 0 }), "params"},
		{"negative cleanup grace", with(func(s *limiter.PolicySpec) { s.CleanupGrace = -time.Second }), "cleanup_grace"},
		{"fractional cleanup grace", with(func(s *limiter.PolicySpec) { s.CleanupGrace = 1500 * time.Microsecond }), "cleanup_grace"},
		{"huge cleanup grace", with(func(s *limiter.PolicySpec) { s.CleanupGrace = tenYears + time.Millisecond }), "cleanup_grace"},
		{"negative clock regression", with(func(s *limiter.PolicySpec) { s.MaxClockRegression = -1 * time.Millisecond }), "max_clock_regression"},
		{"fractional clock regression", with(func(s *limiter.PolicySpec) { s.MaxClockRegression = time.Microsecond }), "max_clock_regression"},
		{"unknown failure mode", with(func(s *limiter.PolicySpec) { s.FailureMode = 7 }), "failure_mode"},
		{"negative limit", with(func(s *limiter.PolicySpec) { s.Params = limiter.FixedWindowParams{Limit: -1, Window: time.Second} }), "limit"},
		{"limit above 2^53-1", with(func(s *limiter.PolicySpec) {
			s.Params = limiter.FixedWindowParams{Limit: limiter.MaxSafeInteger + 1, Window: time.Second}
		}), "limit"},
		{"zero window", with(func(s *limiter.PolicySpec) { s.Params = limiter.FixedWindowParams{Limit: 1} }), "window"},
		{"sub-millisecond window", with(func(s *limiter.PolicySpec) { s.Params = limiter.FixedWindowParams{Limit: 1, Window: time.Microsecond} }), "window"},
		{"fractional window", with(func(s *limiter.PolicySpec) {
			s.Params = limiter.FixedWindowParams{Limit: 1, Window: 1001 * time.Microsecond}
		}), "window"},
		{"window above ten years", with(func(s *limiter.PolicySpec) {
			s.Params = limiter.FixedWindowParams{Limit: 1, Window: tenYears + time.Millisecond}
		}), "window"},
		{"sliding negative limit", sw(-5, time.Second), "limit"},
		{"sliding zero window", sw(5, 0), "window"},
		{"sliding limit * scale above 2^53-1", sw(limiter.MaxSafeInteger/limiter.SlidingScale+1, time.Second), "limit"},
		{"sliding window * scale above 2^53-1", sw(5, time.Duration(limiter.MaxSafeInteger/limiter.SlidingScale+1)*time.Millisecond), "window"},
		{"bucket negative capacity", tb(-1, 1, time.Second), "capacity"},
		{"bucket capacity above 2^53-1", tb(limiter.MaxSafeInteger+1, 1, time.Second), "capacity"},
		{"bucket zero refill", tb(10, 0, time.Second), "refill_amount"},
		{"bucket refill above 2^53-1", tb(10, limiter.MaxSafeInteger+1, time.Second), "refill_amount"},
		{"bucket zero period", tb(10, 1, 0), "refill_period"},
		{"bucket fractional period", tb(10, 1, 1500*time.Microsecond), "refill_period"},
		{"bucket capacity*period above 2^53-1", tb(limiter.MaxSafeInteger-999_999, 1_000_000, time.Millisecond), "capacity"},
		{"bucket refill from empty above ten years", tb(1_000_000_000, 1, time.Second), "capacity"},
		{"negative max cost", with(func(s *limiter.PolicySpec) { s.MaxCost = -1 }), "max_cost"},
		{"max cost above limit", with(func(s *limiter.PolicySpec) { s.MaxCost = 11 }), "max_cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := limiter.NewPolicy(tc.spec)
			if tc.wantErr == "" {
				if err != nil || p == nil {
					t.Fatalf("NewPolicy: %v", err)
				}
				return
			}
			var fe *limiter.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.wantErr {
				t.Fatalf("NewPolicy error = %v, want a FieldError naming %q", err, tc.wantErr)
			}
		})
	}
}

func TestPolicyDefaults(t *testing.T) {
	p := limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.TokenBucket,
		Params: limiter.TokenBucketParams{Capacity: 50, RefillAmount: 10, RefillPeriod: 4 * time.Second}})
	if p.Revision() != 1 || p.MaxCost() != 50 || p.CleanupGraceMillis() != 1000 || p.MaxClockRegressionMillis() != 2000 ||
		p.FailureMode() != limiter.FailClosed || p.Certainty() != limiter.Certain {
		t.Fatalf("defaults: %+v", p.Spec())
	}
	if a, per := p.Refill(); a != 1 || per != 400 {
		t.Fatalf("Refill() = %d per %dms, want 1 per 400ms", a, per)
	}
}

// A configured policy is labelled by its ID; a policy of a group (made at
// request time) by its group, whatever its ID.
func TestPolicyLabel(t *testing.T) {
	spec := limiter.PolicySpec{ID: "edge:override:second/atk_key_0", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}}
	if p := limitertest.Policy(t, spec); p.Label() != spec.ID || p.Group() != "" {
		t.Fatalf("configured: Label %q, Group %q", p.Label(), p.Group())
	}
	spec.Group = "edge:override"
	if p := limitertest.Policy(t, spec); p.Label() != "edge:override" || p.Group() != "edge:override" || p.ID() != spec.ID {
		t.Fatalf("grouped: Label %q, Group %q, ID %q", p.Label(), p.Group(), p.ID())
	}
}

func TestRequestValidate(t *testing.T) {
	p := fixed(t, 10, time.Second)
	for _, tc := range []struct {
		name    string
		r       limiter.Request
		wantErr string
	}{
		{"valid", limiter.Request{Policy: p, Cost: 10}, ""},
		{"no policy", limiter.Request{Cost: 1}, "policy"},
		{"zero cost", limiter.Request{Policy: p}, "cost"},
		{"cost above max", limiter.Request{Policy: p, Cost: 11}, "cost"},
		{"evaluation id", limiter.Request{Policy: p, Cost: 1, EvaluationID: "x"}, "evaluation_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			var fe *limiter.FieldError
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (!errors.As(err, &fe) || fe.Field != tc.wantErr) {
				t.Fatalf("Validate() = %v, want field %q", err, tc.wantErr)
			}
		})
	}
}
