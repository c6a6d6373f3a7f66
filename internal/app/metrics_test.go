package app

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/statsd/statsdtest"
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

// TestStatsdServe serves with --statsd-addr (and the tags and protocol
// from the environment), makes calls, stops, and checks that the statsd
// server received the reference's stat names and values, the last counts
// being sent at stop, and no descriptor value.
func TestStatsdServe(t *testing.T) {
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto, func(t *testing.T) {
			srv := statsdtest.Start(t, proto)
			rules := writeRules(t, t.TempDir(), testRules)
			// An interval longer than the test: what arrives is sent at stop.
			r := startServe(t, []string{"--config", rules, "--statsd-addr", srv.Addr, "--statsd-flush-interval", "1h"},
				map[string]string{"ENVOY_RLS_STATSD_PROTOCOL": proto, "ENVOY_RLS_STATSD_EXTRA_TAGS": "cluster:eu-1", "ENVOY_RLS_NEAR_LIMIT_RATIO": "0.5"}, hooks{})
			r.wantCodes(t, "zed-the-user", allowed, allowed, denied)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			const tag = ".__cluster=eu-1"
			want := map[string]int64{"ratelimit_server.ShouldRateLimit.total_requests" + tag: 3}
			// limit 2, ratio 0.5: the second hit is near.
			statsdtest.AddRule(want, "app.user", tag, statsdtest.RuleCounts{Total: 3, Within: 2, Near: 1, Over: 1})
			srv.WaitCounters(t, want, 10*time.Second)
			srv.CheckNoLineContains(t, "zed")
			if !strings.Contains(r.logs.String(), "sending stats to statsd") {
				t.Fatalf("the statsd sink was not logged:\n%s", r.logs)
			}
		})
	}
}
