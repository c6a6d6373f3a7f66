package app

import (
	"context"
	"io"
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

func TestTopFlagErrors(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--top-counters", "0"}, nil, `--top-counters="0": must be an integer from 1 to 4096`},
		{[]string{"--top-max-policies", "70000"}, nil, `--top-max-policies="70000": must be an integer from 1 to 65536`},
		{[]string{"--top-window", "500ms"}, nil, `--top-window="500ms": must be a duration of at least 1s, such as 1m`},
		{nil, map[string]string{"ENVOY_RLS_TOP_METRIC_SERIES": "-1"}, `ENVOY_RLS_TOP_METRIC_SERIES="-1": must be an integer from 0 to 1000`},
	} {
		err := Run(context.Background(), append([]string{"serve", "--config", rules}, tc.args...), func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v %v: err %v, want %s", tc.args, tc.env, err, tc.want)
		}
	}
}
