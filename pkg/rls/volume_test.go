package rls

import (
	"testing"
)

// hits_total adds each decision's cost whatever its result (a probe adds
// 0), and the duration histograms carry the configured domain or
// "unknown".
func TestHitsAndDurationMetrics(t *testing.T) {
	e := newRealEnv(t)
	e.call(t, request("rls", withHits(desc("user", "volume"), 2)))
	e.call(t, request("rls", withHits(desc("user", "volume"), 5))) // above the limit of 3: denied without asking the store, still counted
	e.call(t, request("rls", withHits(desc("user", "volume"), 0))) // a probe
	e.call(t, request("not-configured", desc("user", "volume")))
	m := e.metrics(t)
	for series, want := range map[string]string{
		`envoy_rls_hits_total{domain="rls",policy="rls:per-user"}`:                          "7",
		`envoy_rls_decisions_total{domain="rls",policy="rls:per-user",result="ok"}`:         "2",
		`envoy_rls_decisions_total{domain="rls",policy="rls:per-user",result="over_limit"}`: "1",
		`envoy_rls_call_duration_seconds_count{domain="rls"}`:                               "3",
		`envoy_rls_call_duration_seconds_count{domain="unknown"}`:                           "1",
		`envoy_rls_store_duration_seconds_count{domain="rls"}`:                              "2",
	} {
		if got := counterValue(m, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
}
