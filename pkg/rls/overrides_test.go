package rls

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// overrideDesc is a descriptor of kv (alternating keys and values) that
// carries its own limit of n per unit.
func overrideDesc(n uint32, unit typev3.RateLimitUnit, kv ...string) *rlv3.RateLimitDescriptor {
	d := desc(kv...)
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	return d
}

// TestOverridePolicyCap: with MaxOverridePolicies 2, two override policies
// of the domain are limited as asked (another value, or other numbers, of
// a tracked policy are that policy); a third is OVER_LIMIT without asking
// the store, with a Retry-After until the earliest tracked policy's state
// is gone (its one-second window and the one-second grace), counted by
// domain, and a configured limit beside it takes nothing. Once that time
// has passed, a new policy takes the free place.
func TestOverridePolicyCap(t *testing.T) {
	e := newRealEnv(t, func(c *Config) { c.MaxOverridePolicies = 2 })
	sec, hour := typev3.RateLimitUnit_SECOND, typev3.RateLimitUnit_HOUR
	for _, d := range []*rlv3.RateLimitDescriptor{
		overrideDesc(5, sec, "route", "r1"), overrideDesc(5, hour, "user", "ann"),
		overrideDesc(5, sec, "route", "r2"), overrideDesc(9, hour, "user", "ann"),
	} {
		if resp := e.call(t, request("rls", d)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("tracked override %v: %v", d, resp)
		}
	}
	_, before := e.store.Counts()
	resp := e.call(t, request("rls", overrideDesc(5, typev3.RateLimitUnit_MINUTE, "other", "x")))
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetRequestsPerUnit() != 5 || st.LimitRemaining != 0 ||
		headers(resp)["Retry-After"] != "2" || st.DurationUntilReset.AsDuration() != 2*time.Second {
		t.Fatalf("a third override policy: %v %v; want OVER_LIMIT, limit 5, 0 left, Retry-After 2", resp.OverallCode, st)
	}
	if _, after := e.store.Counts(); after != before {
		t.Fatalf("the store was asked %d times for a refused override", after-before)
	}
	// Beside a configured limit: nothing taken from it.
	resp = e.call(t, request("rls", desc("user", "bea"), overrideDesc(5, typev3.RateLimitUnit_DAY, "other", "y")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a refused override beside a configured limit: %v", resp.OverallCode)
	}
	if resp := e.call(t, request("rls", desc("user", "bea"))); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the configured limit after the refused call: %d left, want 2 (3 - this call)", resp.Statuses[0].LimitRemaining)
	}
	m := e.metrics(t)
	for series, want := range map[string]string{
		`envoy_rls_override_refused_total{domain="rls"}`:                                       "2",
		`envoy_rls_override_policies{domain="rls"}`:                                            "2",
		`envoy_rls_decisions_total{domain="rls",policy="override",result="over_limit"}`:        "2",
		`envoy_rls_decisions_total{domain="rls",policy="override",result="ok"}`:                "4",
		`envoy_rls_decisions_total{domain="rls",policy="rls:per-user",result="over_limit"}`:    "0",
		`envoy_rls_decisions_total{domain="rls",policy="rls:per-user",result="ok"}`:            "2",
		`envoy_rls_hits_total{domain="rls",policy="override"}`:                                 "6",
		`envoy_rls_near_limit_total{domain="rls",policy="override"}`:                           "0",
		`envoy_rls_local_fallback_decisions_total{domain="rls",policy="override",result="ok"}`: "0",
	} {
		if got := counterValue(m, series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}
	for _, key := range []string{"route", "other", "ann"} {
		for _, line := range strings.Split(m, "\n") {
			if name, _, _ := strings.Cut(line, " "); !strings.HasPrefix(line, "#") && strings.Contains(name, key) {
				t.Errorf("a label carries the request's %q: %s", key, line)
			}
		}
	}

	// The one-second policies' states are gone 2 s after their last use.
	e.clock.Advance(2001 * time.Millisecond)
	if resp := e.call(t, request("rls", overrideDesc(5, typev3.RateLimitUnit_MINUTE, "other", "x"))); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a new override policy once the earliest was gone: %v", resp)
	}
	if got := counterValue(e.metrics(t), `envoy_rls_override_policies{domain="rls"}`); got != "2" {
		t.Fatalf("override_policies %s after the swap, want 2", got)
	}
	// The hourly one is still tracked, with its count.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK,
		rlsv3.RateLimitResponse_OVER_LIMIT} {
		if resp := e.call(t, request("rls", overrideDesc(5, hour, "user", "ann"))); resp.OverallCode != want {
			t.Fatalf("tracked hourly override call %d: %v, want %v", i, resp.OverallCode, want)
		}
	}
}

func TestOverrideCapConfig(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{-1, MaxOverridePoliciesBound + 1} {
		if _, err := New(Config{Rules: func() Rules { return nil }, Store: memStore(t, nil, 8), Metrics: m, MaxOverridePolicies: n}); err == nil {
			t.Errorf("MaxOverridePolicies %d: no error", n)
		}
	}
}

// TestOverrideCapConcurrent: goroutines admitting distinct override
// policies of one domain at once never get more than the bound admitted,
// and every goroutine's repeat of an admitted policy is admitted.
func TestOverrideCapConcurrent(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := newOverrideCap(10, m)
	const workers, each = 8, 100
	admitted := make([][]*limiter.Policy, workers)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				p := limitertest.Policy(t, limiter.PolicySpec{ID: fmt.Sprintf("d:override:hour/k%d_%d", g, i), Group: "d:override",
					Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Hour}})
				if ok, _ := c.admit("d", p, 1_000); ok {
					admitted[g] = append(admitted[g], p)
				}
			}
			for _, p := range admitted[g] {
				if ok, _ := c.admit("d", p, 2_000); !ok {
					t.Errorf("a tracked policy refused: %s", p.ID())
				}
			}
		})
	}
	wg.Wait()
	n := 0
	for _, a := range admitted {
		n += len(a)
	}
	if n != 10 {
		t.Fatalf("%d policies admitted, want the bound 10", n)
	}
	// Another domain has a bound of its own.
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "e:override:hour/k", Group: "e:override",
		Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Hour}})
	if ok, _ := c.admit("e", p, 1_000); !ok {
		t.Fatal("another domain's first override refused")
	}
}
