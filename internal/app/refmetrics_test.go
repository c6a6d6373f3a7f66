package app

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestServeReferenceMetrics: with --reference-metrics-addr the reference's
// series are served there, at --reference-metrics-path only, with the
// decisions' counts and every rule load; envoy-rls's own metrics stay on
// the admin port.
func TestServeReferenceMetrics(t *testing.T) {
	dir, rules := linkedRules(t)
	r := startServe(t, []string{"--config", rules, "--reference-metrics-addr", "127.0.0.1:0", "--reference-metrics-path", "/prom{x"}, nil, hooks{})
	r.wantCodes(t, "alice-raw-value", rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT)

	writeRules(t, dir, badUnitRules)
	r.sighup(t)

	addr := servingField(t, r, "reference_metrics_addr")
	// The path is taken as written, braces included.
	code, body := httpGet(t, "http://"+addr+"/prom%7Bx")
	if code != http.StatusOK {
		t.Fatalf("GET /prom{x: %d %s", code, body)
	}
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits{domain="app",key1="user"} 3`,
		`ratelimit_service_rate_limit_within_limit{domain="app",key1="user"} 2`,
		`ratelimit_service_rate_limit_near_limit{domain="app",key1="user"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="app",key1="user"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 3`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 3`,
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_config_load_error 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("reference metrics lack %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, "alice") || strings.Contains(body, "envoy_rls_") {
		t.Errorf("reference metrics hold a request value or envoy-rls's own series:\n%s", body)
	}
	if resp, err := http.Post("http://"+addr+"/prom%7Bx", "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST to the reference listener: %v %v, want 405", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	if code, _ := httpGet(t, "http://"+addr+"/metrics"); code != http.StatusNotFound {
		t.Errorf("GET /metrics on the reference listener: %d, want 404", code)
	}
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, `envoy_rls_hits_total{domain="app",policy="app/user"} 3`) || strings.Contains(m, "ratelimit_service_") {
		t.Errorf("admin /metrics:\n%s", m)
	}
}

// TestServeReferenceMetricsOff: without the flag nothing listens and the
// serving line names no such address.
func TestServeReferenceMetricsOff(t *testing.T) {
	r := startServe(t, []string{"--config", writeRules(t, t.TempDir(), testRules)}, nil, hooks{})
	if strings.Contains(r.logs.String(), "reference_metrics_addr") {
		t.Errorf("serving line names a reference metrics address:\n%s", r.logs)
	}
}

// servingField is a string field of the serving log line.
func servingField(t *testing.T, r *running, field string) string {
	t.Helper()
	for _, line := range strings.Split(r.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "serving" {
			if v, ok := m[field].(string); ok {
				return v
			}
		}
	}
	t.Fatalf("no %s in the serving line:\n%s", field, r.logs)
	return ""
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
