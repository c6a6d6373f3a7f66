package refmetrics

import (
	"fmt"
	"strings"
	"testing"
)

// mapped is a Series as text: name{k="v",...} in label order, or "drop".
func mapped(m *Mapper, stat string, kind Kind) string {
	s, ok := m.Map(stat, kind)
	if !ok {
		return "drop"
	}
	return s.Name + labelText(s.Labels)
}

// mapCase is a stat of a kind and the series it maps to, as mapped
// writes it.
type mapCase struct {
	stat string
	kind Kind
	want string
}

// checkMapping fails the test when m could not be made (err) and for every
// case m maps otherwise.
func checkMapping(t *testing.T, m *Mapper, err error, cases []mapCase) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if got := mapped(m, tc.stat, tc.kind); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.stat, got, tc.want)
		}
	}
}

func labelText(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	id := seriesID(Series{Labels: labels})
	var parts []string
	for _, kv := range strings.Split(id, "\xff")[1:] {
		k, v, _ := strings.Cut(kv, "\xfe")
		parts = append(parts, fmt.Sprintf("%s=%q", k, v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestDefaultMapping: the reference's default mapping of every stat the
// service sends.
func TestDefaultMapping(t *testing.T) {
	m, err := defaultMapper()
	checkMapping(t, m, err, []mapCase{
		{"ratelimit.service.rate_limit.ai.tenant.total_hits", Counter, `ratelimit_service_rate_limit_total_hits{domain="ai",key1="tenant"}`},
		{"ratelimit.service.rate_limit.ai.tenant_acme.over_limit", Counter, `ratelimit_service_rate_limit_over_limit{domain="ai",key1="tenant_acme"}`},
		{"ratelimit.service.rate_limit.ai.tenant.near_limit", Counter, `ratelimit_service_rate_limit_near_limit{domain="ai",key1="tenant"}`},
		{"ratelimit.service.rate_limit.ai.tenant.within_limit", Counter, `ratelimit_service_rate_limit_within_limit{domain="ai",key1="tenant"}`},
		{"ratelimit.service.rate_limit.ai.tenant.shadow_mode", Counter, `ratelimit_service_rate_limit_shadow_mode{domain="ai",key1="tenant"}`},
		// Three levels match neither form: the name is kept, escaped.
		{"ratelimit.service.rate_limit.ai.tenant.user.total_hits", Counter, `ratelimit_service_rate_limit_ai_tenant_user_total_hits`},
		// Four levels: the first two keys; five: the domain takes the
		// leading parts.
		{"ratelimit.service.rate_limit.ai.a.b.c.within_limit", Counter, `ratelimit_service_rate_limit_within_limit{domain="ai",key1="a",key2="b"}`},
		{"ratelimit.service.rate_limit.ai.a.b.c.d.total_hits", Counter, `ratelimit_service_rate_limit_total_hits{domain="ai.a",key1="b",key2="c"}`},
		{"ratelimit.service.rate_limit.ai.tenant.over_limit_with_local_cache", Counter, `ratelimit_service_rate_limit_ai_tenant_over_limit_with_local_cache`},
		{"ratelimit_server.ShouldRateLimit.total_requests", Counter, `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`},
		{"ratelimit_server.ShouldRateLimit.response_time", Timer, `ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}`},
		{"ratelimit.service.call.should_rate_limit.redis_error", Counter, `ratelimit_service_should_rate_limit_error{err_type="redis_error"}`},
		{"ratelimit.service.call.should_rate_limit.service_error", Counter, `ratelimit_service_should_rate_limit_error{err_type="service_error"}`},
		{"ratelimit.service.config_load_success", Counter, `ratelimit_service_config_load_success`},
		{"ratelimit.service.config_load_error", Counter, `ratelimit_service_config_load_error`},
		{"9lives.x", Counter, `_9lives_x`},
	})
}

// envoyGatewayMapping is a mapping file of the shape Envoy Gateway mounts
// (PROMETHEUS_MAPPER_YAML): two and three levels by glob, the per-call and
// rule-load stats, everything else dropped.
const envoyGatewayMapping = `mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit_server.*.total_requests"
    name: "ratelimit_service_total_requests"
    match_metric_type: counter
    labels:
      grpc_method: "$1"
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    timer_type: histogram
    labels:
      grpc_method: "$1"
  - match: "ratelimit.service.config_load_success"
    name: "ratelimit_service_config_load_success"
    match_metric_type: counter
  - match: "."
    match_type: "regex"
    action: "drop"
    name: "dropped"
`

func TestEnvoyGatewayMapping(t *testing.T) {
	m, err := ParseMapping(strings.NewReader(envoyGatewayMapping))
	checkMapping(t, m, err, []mapCase{
		{"ratelimit.service.rate_limit.default/eg/http.httproute/default/r/rule/0.total_hits", Counter, `ratelimit_service_rate_limit_total_hits{domain="default/eg/http",key1="httproute/default/r/rule/0"}`},
		{"ratelimit.service.rate_limit.ai.tenant.user.total_hits", Counter, `ratelimit_service_rate_limit_total_hits{domain="ai",key1="tenant",key2="user"}`},
		{"ratelimit.service.rate_limit.ai.a.b.c.total_hits", Counter, "drop"},
		{"ratelimit.service.rate_limit.ai.tenant.over_limit", Counter, "drop"},
		{"ratelimit_server.ShouldRateLimit.total_requests", Counter, `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`},
		// match_metric_type counter: a timer of that name does not match.
		{"ratelimit_server.ShouldRateLimit.total_requests", Timer, "drop"},
		{"ratelimit_server.ShouldRateLimit.response_time", Timer, `ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}`},
		{"ratelimit.service.config_load_success", Counter, `ratelimit_service_config_load_success`},
	})
}

// TestParseMappingRefuses: a mapping file that does not load is refused in
// one line naming the line, the field and why (never a Go type).
func TestParseMappingRefuses(t *testing.T) {
	const fields = "action, help, labels, match, match_metric_type, match_type, name, observer_type, timer_type"
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "defaults:\n  observer_type: histogram\n", `line 1: unknown field "defaults" (the fields are mappings)`},
		{"unknown mapping field", "mappings:\n  - match: a.b\n    name: x\n    ttl: 1m\n", `line 4: unknown field "ttl" (the fields are ` + fields + ")"},
		{"field twice", "mappings:\n  - match: a.b\n    name: x\n    name: y\n", "line 4: field name given twice"},
		{"labels a list", "mappings:\n  - match: a.*\n    name: x\n    labels: [a, b]\n", "line 4: labels: must be a map of label names to values"},
		{"label value a list", "mappings:\n  - match: a.*\n    name: x\n    labels:\n      a: [1]\n", "line 5: labels: must be a map of label names to values"},
		{"name a map", "mappings:\n  - match: a.*\n    name: {a: 1}\n", "line 3: name: must be a string"},
		{"mappings a map", "mappings: {a: 1}\n", "line 1: mappings: must be a list of mappings"},
		{"mapping a string", "mappings:\n  - a.b\n", "line 2: must be a map of the fields " + fields},
		{"file a list", "- a\n", "line 1: must be a map of the fields mappings"},
		{"match type", "mappings:\n  - match: a.b\n    name: x\n    match_type: exact\n", `mapping 1 (match "a.b"): match_type "exact": must be glob or regex`},
		{"action", "mappings:\n  - match: a.b\n    name: x\n    action: keep\n", `mapping 1 (match "a.b"): action "keep": must be map or drop`},
		{"regex", "mappings:\n  - match: 'a(b'\n    match_type: regex\n    name: x\n", "mapping 1 (match \"a(b\"): match: error parsing regexp: missing closing ): `a(b`"},
		{"no name", "mappings:\n  - match: a.b\n", `mapping 1 (match "a.b"): name is empty`},
		{"no match", "mappings:\n  - name: x\n", `mapping 1 (match ""): match is empty`},
		{"label name", "mappings:\n  - match: a.*\n    name: x\n    labels: {\"bad-name\": $1}\n", `mapping 1 (match "a.*"): label name "bad-name": must match ^[a-zA-Z_][a-zA-Z0-9_]*$ and not start with __`},
		{"reserved label name", "mappings:\n  - match: a.*\n    name: x\n    labels: {__name__: $1}\n", `mapping 1 (match "a.*"): label name "__name__": must match ^[a-zA-Z_][a-zA-Z0-9_]*$ and not start with __`},
		{"metric type", "mappings:\n  - match: a.*\n    name: x\n    match_metric_type: set\n", `mapping 1 (match "a.*"): match_metric_type "set": must be counter, gauge, observer or timer`},
		{"timer type", "mappings:\n  - match: a.*\n    name: x\n    timer_type: gauge\n", `mapping 1 (match "a.*"): timer_type "gauge": must be histogram, summary or default`},
		{"not yaml", "mappings: [", "yaml: line 1: did not find expected node content"},
	} {
		_, err := ParseMapping(strings.NewReader(tc.yaml))
		if fmt.Sprint(err) != tc.want {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.want)
		}
	}
	big := "mappings:\n" + strings.Repeat("  - {match: a.b, name: x}\n", MaxMappings+1)
	if _, err := ParseMapping(strings.NewReader(big)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("%d mappings: error %v", MaxMappings+1, err)
	}
	if m, err := ParseMapping(strings.NewReader("")); err != nil || m == nil {
		t.Errorf("empty file: %v, %v (want a mapper that maps nothing)", m, err)
	}
}
