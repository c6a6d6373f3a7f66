package algorithm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

func chargePolicy(t *testing.T, a limiter.Algorithm, limit int64, c limiter.Charge) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{ID: "budget", Algorithm: a, Charge: c,
		Params: a.ParamsFor(limiter.Rate{Limit: limit, Window: time.Hour})})
}

// TestChargeTable: the AI-gateway sequence of the reference (1000 per hour,
// charges of 600, checks as one unit that is never written) on every
// algorithm: with charge always the second charge is recorded past the
// limit and everything after it is denied; with the default nothing
// denied is recorded.
func TestChargeTable(t *testing.T) {
	const t0 = 1_700_000_000_000 / 3_600_000 * 3_600_000 // an hour boundary
	for _, a := range limiter.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			for _, c := range []limiter.Charge{limiter.ChargeAlways, limiter.ChargeAllowed} {
				limit := int64(1000)
				if a == limiter.SlidingLog {
					limit = 500 // its charge-always bound; costs halved below
				}
				p := chargePolicy(t, a, limit, c)
				var st algorithm.State
				check := func(step int, wantOK bool) {
					t.Helper()
					_, r, _ := algorithm.Apply(st, t0+int64(step), p, 1)
					if (r.Status == algorithm.StatusAllowed) != wantOK {
						t.Fatalf("%v step %d: check %v, want allowed %v", c, step, r, wantOK)
					}
				}
				charge := func(step int, cost int64, wantOK bool) algorithm.Reply {
					t.Helper()
					next, r, write := algorithm.Apply(st, t0+int64(step), p, cost)
					if (r.Status == algorithm.StatusAllowed) != wantOK {
						t.Fatalf("%v step %d: charge %d %v, want allowed %v", c, step, cost, r, wantOK)
					}
					if write {
						st = next
					}
					return r
				}
				third := limit * 3 / 5
				check(0, true)
				charge(1, third, true)
				check(2, true)
				r := charge(3, third, false)
				if c == limiter.ChargeAllowed {
					check(4, true)
					charge(5, 1, true)
					continue
				}
				if r.Remaining != 0 || r.RetryAfterMs <= 0 {
					t.Fatalf("over-limit charge: %+v", r)
				}
				check(4, false)
				r = charge(5, 1, false)
				// Retry-After says when one unit fits again.
				at := t0 + 5 + r.RetryAfterMs
				if _, r2, _ := algorithm.Apply(st, at, p, 1); r2.Status != algorithm.StatusAllowed {
					t.Fatalf("one unit at the retry time (%d ms): %+v", r.RetryAfterMs, r2)
				}
			}
		})
	}
}

// TestChargeDebtBound: charges far beyond the limit record at most the
// ceiling (twice the limit): the time until one unit fits again is at most
// that of a debt of one whole limit.
func TestChargeDebtBound(t *testing.T) {
	const t0 = 3_600_000 * 500_000
	for _, a := range limiter.Algorithms() {
		p := chargePolicy(t, a, 100, limiter.ChargeAlways)
		if p.Ceiling() != 200 || p.MaxCost() != 200 {
			t.Fatalf("%v: ceiling %d, max cost %d, want 200", a, p.Ceiling(), p.MaxCost())
		}
		var st algorithm.State
		var last algorithm.Reply
		for i := range 50 {
			next, r, write := algorithm.Apply(st, t0, p, 200)
			if i > 0 && r.Status != algorithm.StatusDenied {
				t.Fatalf("%v: charge %d: %+v", a, i, r)
			}
			if write {
				st = next
			}
			last = r
		}
		// Two hours at most: the debt of one limit plus the limit itself.
		if last.RetryAfterMs > 2*3_600_000 {
			t.Errorf("%v: retry after %d ms exceeds two windows", a, last.RetryAfterMs)
		}
		if _, again, _ := algorithm.Apply(st, t0, p, 1); again != last {
			t.Errorf("%v: the debt grew past its bound: %+v then %+v", a, last, again)
		}
	}
}

// TestChargePolicyRules: charge always refuses a penalty box and limits
// whose doubled arithmetic would not be exact.
func TestChargePolicyRules(t *testing.T) {
	pn := limiter.Penalty{Duration: time.Second, MaxDuration: time.Minute, Decay: time.Minute}
	for name, spec := range map[string]limiter.PolicySpec{
		"penalty": {ID: "x", Algorithm: limiter.FixedWindow, Charge: limiter.ChargeAlways, Penalty: pn,
			Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}},
		"sliding log above 500": {ID: "x", Algorithm: limiter.SlidingLog, Charge: limiter.ChargeAlways,
			Params: limiter.SlidingLogParams{Limit: 501, Window: time.Second}},
		"max cost above the ceiling": {ID: "x", Algorithm: limiter.FixedWindow, Charge: limiter.ChargeAlways, MaxCost: 21,
			Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}},
		"unknown": {ID: "x", Algorithm: limiter.FixedWindow, Charge: 9,
			Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}},
	} {
		if _, err := limiter.NewPolicy(spec); !errors.As(err, new(*limiter.FieldError)) {
			t.Errorf("%s: NewPolicy = %v, want a *FieldError", name, err)
		}
	}
	for _, s := range []string{"", "allowed", "always"} {
		c, err := limiter.ParseCharge(s)
		if err != nil || (s != "" && c.String() != s) {
			t.Errorf("ParseCharge(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := limiter.ParseCharge("never"); err == nil {
		t.Error("ParseCharge accepted never")
	}
}
