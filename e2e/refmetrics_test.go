package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// gatewayMapping is a statsd_exporter mapping file of the form Envoy
// Gateway mounts at PROMETHEUS_MAPPER_YAML: rule stats of two and three
// levels by glob, the per-call and rule-load stats, and everything else
// dropped.
const gatewayMapping = `mappings:
  - {match: "ratelimit.service.rate_limit.*.*.total_hits", name: ratelimit_service_rate_limit_total_hits, timer_type: histogram, labels: {domain: "$1", key1: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.over_limit", name: ratelimit_service_rate_limit_over_limit, timer_type: histogram, labels: {domain: "$1", key1: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.near_limit", name: ratelimit_service_rate_limit_near_limit, timer_type: histogram, labels: {domain: "$1", key1: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.within_limit", name: ratelimit_service_rate_limit_within_limit, timer_type: histogram, labels: {domain: "$1", key1: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.*.total_hits", name: ratelimit_service_rate_limit_total_hits, timer_type: histogram, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: "ratelimit.service.rate_limit.*.*.*.over_limit", name: ratelimit_service_rate_limit_over_limit, timer_type: histogram, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: "ratelimit.service.rate_limit.*.*.*.near_limit", name: ratelimit_service_rate_limit_near_limit, timer_type: histogram, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: "ratelimit.service.rate_limit.*.*.*.within_limit", name: ratelimit_service_rate_limit_within_limit, timer_type: histogram, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: "ratelimit.service.call.should_rate_limit.*", name: ratelimit_service_should_rate_limit_error, match_metric_type: counter, labels: {err_type: "$1"}}
  - {match: "ratelimit_server.*.total_requests", name: ratelimit_service_total_requests, match_metric_type: counter, labels: {grpc_method: "$1"}}
  - {match: "ratelimit_server.*.response_time", name: ratelimit_service_response_time_seconds, timer_type: histogram, labels: {grpc_method: "$1"}}
  - {match: "ratelimit.service.config_load_success", name: ratelimit_service_config_load_success, match_metric_type: counter}
  - {match: "ratelimit.service.config_load_error", name: ratelimit_service_config_load_error, match_metric_type: counter}
  - {match: "ratelimit.service.rate_limit.*.*.*.shadow_mode", name: ratelimit_service_rate_limit_shadow_mode, timer_type: histogram, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: ".", match_type: regex, action: drop, name: dropped}
`

// gatewayRules is a second rule file, shaped as Envoy Gateway's: a route
// level with a configured value, then a per-client level: 1 call an hour.
const gatewayRules = `domain: eg
descriptors:
  - key: route
    value: r1
    descriptors:
      - key: client
        rate_limit: {unit: hour, requests_per_unit: 1}
`

// TestRatelimitEnvoyGatewayPrometheus: started as ratelimit with Envoy
// Gateway's full environment (USE_STATSD=false, USE_PROMETHEUS=true,
// PROMETHEUS_ADDR, PROMETHEUS_MAPPER_YAML, LOG_LEVEL left to the
// reference's default) and RESPONSE_DYNAMIC_METADATA=true, a replica
// answers with dynamic metadata, prints its serving line and serves the
// reference's metric names, labels and counts on PROMETHEUS_ADDR;
// another, without PROMETHEUS_MAPPER_YAML, serves the reference's default
// mapping at PROMETHEUS_PATH. Labels hold rule keys and configured values,
// never a request's values.
func TestRatelimitEnvoyGatewayPrometheus(t *testing.T) {
	g := startEnvoyGateway(t, "CACHE_KEY_PREFIX="+unique("prom")+":", "LOG_LEVEL=")
	root := envValue(g.env, "RUNTIME_ROOT")
	writeFile(t, filepath.Join(root, "ratelimit", "config"), "eg.yaml", gatewayRules)
	mapping := writeFile(t, t.TempDir(), "conf.yaml", gatewayMapping)
	prom := []string{"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0"}
	a := startReplica(t, "ratelimit-eg", replicaConfig{Compat: true, Creds: g.creds,
		Env: append(append(g.env, prom...), "PROMETHEUS_MAPPER_YAML="+mapping, "RESPONSE_DYNAMIC_METADATA=true")})
	b := startReplica(t, "ratelimit-default", replicaConfig{Compat: true, Creds: g.creds,
		Env: append(append(g.env, prom...), "PROMETHEUS_PATH=/stats")})
	// LOG_LEVEL unset is the reference's warn, and the serving line shows.
	if !a.log.contains(`{"level":"warn",`) || !a.log.contains(`"msg":"serving"`) || a.log.contains(`"level":"info"`) {
		t.Errorf("%s: want the serving line at warn and no info line:\n%s", a.name, a.log.tail(4000))
	}
	if a.log.contains("reference setting") {
		t.Errorf("a reference setting was warned about:\n%s", a.log.tail(4000))
	}

	user, client := unique("u"), unique("secret-client")
	for _, r := range []*replica{a, b} {
		r.checkAdmits(t, entry{"user", user + r.name}, 3, 4)
		for i := range 2 {
			res := r.send(callTimeout, &rlsv3.RateLimitRequest{Domain: "eg", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "route", Value: "r1"}, {Key: "client", Value: client + r.name}}}}})
			if want := i == 0; res.Err != nil || res.ok() != want {
				t.Fatalf("%s: eg call %d: %v, want ok=%v", r.name, i+1, res, want)
			}
			// RESPONSE_DYNAMIC_METADATA=true on a only: the domain and
			// what decided, in every answer.
			if withMeta := r == a; withMeta != (res.Metadata != nil) || withMeta && res.Metadata["domain"] != "eg" {
				t.Errorf("%s: eg call %d: dynamic metadata %v, want it %v", r.name, i+1, res.Metadata, withMeta)
			}
		}
	}

	// Envoy Gateway's mapping: two and three levels, everything else
	// dropped.
	wantA := map[string]float64{
		`ratelimit_service_rate_limit_total_hits{domain="e2e",key1="user"}`:                    4,
		`ratelimit_service_rate_limit_within_limit{domain="e2e",key1="user"}`:                  3,
		`ratelimit_service_rate_limit_near_limit{domain="e2e",key1="user"}`:                    1,
		`ratelimit_service_rate_limit_over_limit{domain="e2e",key1="user"}`:                    1,
		`ratelimit_service_rate_limit_total_hits{domain="eg",key1="route_r1",key2="client"}`:   2,
		`ratelimit_service_rate_limit_within_limit{domain="eg",key1="route_r1",key2="client"}`: 1,
		// A limit of 1: floor(1 × 0.8) = 0, so its one allowed hit is near.
		`ratelimit_service_rate_limit_near_limit{domain="eg",key1="route_r1",key2="client"}`: 1,
		`ratelimit_service_rate_limit_over_limit{domain="eg",key1="route_r1",key2="client"}`: 1,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`:                    6,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`:       6,
		`ratelimit_service_config_load_success`:                                              1,
		`ratelimit_service_config_load_error`:                                                0,
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"}`:                  0,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"}`:                0,
	}
	got := waitScrape(t, a, "/metrics", wantA)
	checkOnly(t, a.name, got, wantA, "ratelimit_service_response_time_seconds_bucket", "ratelimit_service_response_time_seconds_sum")

	// The reference's default mapping: three levels are not mapped and keep
	// their escaped statsd name.
	wantB := map[string]float64{
		`ratelimit_service_rate_limit_total_hits{domain="e2e",key1="user"}`: 4,
		`ratelimit_service_rate_limit_over_limit{domain="e2e",key1="user"}`: 1,
		`ratelimit_service_rate_limit_eg_route_r1_client_total_hits`:        2,
		`ratelimit_service_rate_limit_eg_route_r1_client_over_limit`:        1,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`:   6,
		`ratelimit_service_config_load_success`:                             1,
	}
	got = waitScrape(t, b, "/stats", wantB)
	for series := range got {
		if strings.Contains(series, user) || strings.Contains(series, client) {
			t.Errorf("%s: a request value in %s", b.name, series)
		}
	}
	// The path is PROMETHEUS_PATH's only.
	if code, _ := getRefMetrics(t, b, "/metrics"); code != http.StatusNotFound {
		t.Errorf("%s: /metrics on PROMETHEUS_ADDR answered %d, want 404 (PROMETHEUS_PATH=/stats)", b.name, code)
	}
	// envoy-rls's own metrics stay on the admin port.
	if code, body := a.mustAdmin("/metrics"); code != http.StatusOK || !strings.Contains(body, "envoy_rls_") {
		t.Errorf("%s: admin /metrics %d", a.name, code)
	}
}

// TestRatelimitPrometheusMapperRefused: a PROMETHEUS_MAPPER_YAML that does
// not load stops the start with one line naming it, the field and why.
func TestRatelimitPrometheusMapperRefused(t *testing.T) {
	g := startEnvoyGateway(t)
	bad := writeFile(t, t.TempDir(), "conf.yaml", "mappings:\n  - match: ratelimit.*\n    name: x\n    labels: [domain]\n")
	res := startCommand(t, ratelimitLink(t), append(g.env, "USE_STATSD=false", "USE_PROMETHEUS=true",
		"PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_MAPPER_YAML="+bad)).finish(t, runTimeout)
	if res.code != 1 {
		t.Errorf("exit %d, want 1", res.code)
	}
	want := `envoy-rls: PROMETHEUS_MAPPER_YAML="` + bad + `": must be a statsd_exporter mapping file envoy-rls reads ` +
		`(docs/observe.md, Envoy Gateway's Prometheus metrics): line 4: labels: must be a map of label names to values`
	var refused []string
	for _, l := range strings.Split(res.stderr, "\n") {
		if strings.HasPrefix(l, "envoy-rls:") {
			refused = append(refused, l)
		}
	}
	if len(refused) != 1 || refused[0] != want {
		t.Errorf("stderr\n%s\nwant one line\n%s", res.stderr, want)
	}
}

// envValue is the last value of name in env (NAME=value entries).
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// refMetricsAddr is the address of the replica's reference metrics
// listener, from its serving line.
func refMetricsAddr(t *testing.T, r *replica) string {
	t.Helper()
	for _, line := range strings.Split(r.log.tail(1<<20), "\n") {
		var m struct {
			Msg  string `json:"msg"`
			Addr string `json:"reference_metrics_addr"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "serving" && m.Addr != "" {
			return m.Addr
		}
	}
	t.Fatalf("%s: no reference_metrics_addr in the serving line:\n%s", r.name, r.log.tail(4000))
	return ""
}

// getRefMetrics GETs path on the replica's reference metrics listener.
func getRefMetrics(t *testing.T, r *replica, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + refMetricsAddr(t, r) + path)
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitScrape scrapes path until every series of want has its value, and
// returns the last scrape: one value per series, keyed as the text format
// writes it (name{label="value",...}).
func waitScrape(t *testing.T, r *replica, path string, want map[string]float64) map[string]float64 {
	t.Helper()
	var got map[string]float64
	polltest.Eventually(t, 10*time.Second, 20*time.Millisecond, r.name+" "+path, func() error {
		code, body := getRefMetrics(t, r, path)
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		got = map[string]float64{}
		for _, line := range strings.Split(body, "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				return fmt.Errorf("line %q: %v", line, err)
			}
			got[line[:i]] = v
		}
		for series, v := range want {
			if g, ok := got[series]; !ok || g != v {
				return fmt.Errorf("%s = %v (present %v), want %v\n%s", series, g, ok, v, body)
			}
		}
		return nil
	})
	return got
}

// checkOnly fails t for a series in got that is not in want and whose
// name starts with none of also.
func checkOnly(t *testing.T, name string, got, want map[string]float64, also ...string) {
	t.Helper()
next:
	for series := range got {
		if _, ok := want[series]; ok {
			continue
		}
		for _, p := range also {
			if strings.HasPrefix(series, p) {
				continue next
			}
		}
		t.Errorf("%s: unexpected series %s", name, series)
	}
}

// TestRatelimitVersionAndHelp: started as ratelimit, version and --help
// are answered as such (no serve, no environment needed); the help names
// the reference variables the binary reads.
func TestRatelimitVersionAndHelp(t *testing.T) {
	link := ratelimitLink(t)
	res := startCommand(t, link, nil, "version").finish(t, runTimeout)
	if res.code != 0 || !strings.HasPrefix(res.stdout, "version:") || !strings.Contains(res.stdout, "go version:") {
		t.Errorf("ratelimit version: exit %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
	res = startCommand(t, link, nil, "--help").finish(t, runTimeout)
	if res.code != 0 || !strings.Contains(res.stdout, "USE_PROMETHEUS PROMETHEUS_ADDR PROMETHEUS_PATH PROMETHEUS_MAPPER_YAML") ||
		!strings.Contains(res.stdout, "REDIS_URL") || !strings.Contains(res.stdout, "envoy-rls serve --help") {
		t.Errorf("ratelimit --help: exit %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
}
