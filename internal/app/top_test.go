package app

import (
	"regexp"
	"strings"
	"testing"
)

// The volume metrics and, with --top-metric-series, the heaviest subjects
// are exported on /metrics without any raw value.
func TestServeVolumeMetrics(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules) // app/user: 2 per minute
	r := startServe(t, []string{"--config", rules, "--top-metric-series", "2"}, nil, hooks{})
	for range 6 {
		r.check(t, "heavy-user-value")
	}
	r.check(t, "light-user-value")
	_, metrics := r.get(t, "/metrics")
	for _, want := range []string{
		`envoy_rls_hits_total{domain="app",policy="app/user"} 7`,
		`envoy_rls_call_duration_seconds_count{domain="app"} 7`,
		`envoy_rls_store_duration_seconds_count{domain="app"} 7`,
		`envoy_rls_top_untracked_total 0`,
		"envoy_rls_config_last_reload_success_timestamp_seconds 1.",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	heaviest := regexp.MustCompile(`envoy_rls_top_subject_hits\{domain="app",policy="app/user",subject="[0-9a-f]{8}"\} (\d+)`)
	if m := heaviest.FindAllStringSubmatch(metrics, -1); len(m) != 2 || m[0][1] != "6" && m[1][1] != "6" {
		t.Errorf("/metrics: top subject series %q, want two, one of 6 hits", m)
	}
	for _, gone := range []string{"call_latency_seconds", "store_latency_seconds"} {
		if strings.Contains(metrics, gone) {
			t.Errorf("/metrics still has %s", gone)
		}
	}
	for _, out := range []string{metrics, r.logs.String()} {
		if strings.Contains(out, "heavy-user-value") || strings.Contains(out, "light-user-value") {
			t.Fatalf("a raw value leaked:\n%s", out)
		}
	}
}
