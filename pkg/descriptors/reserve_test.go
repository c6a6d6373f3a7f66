package descriptors

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestReserveParse: `reserve:` reaches the policy as written, on every
// rate algorithm that takes it, on a named policy and on one limit of a
// rate_limits list; an absent estimate is 0 (the request's own cost), and
// a limit without reserve has none.
func TestReserveParse(t *testing.T) {
	s := loadText(t, `domain: d
policies:
  budget: {unit: hour, requests_per_unit: 20000, reserve: {ttl: 10m, estimate: 500}}
descriptors:
  - key: fixed
    rate_limit:
      unit: hour
      requests_per_unit: 20000
      reserve:
        ttl: 10m
        estimate: 500
  - key: own
    rate_limit: {unit: hour, requests_per_unit: 20000, reserve: {ttl: 90s}}
  - key: zero
    rate_limit: {unit: hour, requests_per_unit: 20000, reserve: {ttl: 1ms, estimate: 0}}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window, reserve: {ttl: 24h, estimate: 100}}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket, burst: 50, reserve: {ttl: 1m, estimate: 50}}
  - key: gcra
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra, reserve: {ttl: 2m}}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 1000000, calendar: true, time_zone: Europe/Berlin, reserve: {ttl: 1h, estimate: 4000}}
  - key: debt
    rate_limit: {unit: hour, requests_per_unit: 10, charge: always, reserve: {ttl: 1m, estimate: 10}}
  - key: named
    policy: budget
  - key: none
    rate_limit: {unit: hour, requests_per_unit: 20000}
  - key: list
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: day, requests_per_unit: 1000000, reserve: {ttl: 5m, estimate: 800}}
`)
	for key, want := range map[string]limiter.Reserve{
		"fixed":   {TTL: 10 * time.Minute, Estimate: 500},
		"own":     {TTL: 90 * time.Second},
		"zero":    {TTL: time.Millisecond},
		"sliding": {TTL: 24 * time.Hour, Estimate: 100},
		"bucket":  {TTL: time.Minute, Estimate: 50},
		"gcra":    {TTL: 2 * time.Minute},
		"month":   {TTL: time.Hour, Estimate: 4000},
		"debt":    {TTL: time.Minute, Estimate: 10},
		"named":   {TTL: 10 * time.Minute, Estimate: 500},
		"none":    {},
	} {
		if got := policyOf(t, s, key+"=x").Reserve(); got != want {
			t.Errorf("%s: reserve %+v, want %+v", key, got, want)
		}
	}
	m, ok := s.Match("d", e("list=x"))
	if !ok || len(m.Rule.Limits) != 2 {
		t.Fatalf("list: %v %+v", ok, m.Rule)
	}
	if a, b := m.Rule.Limits[0].Policy.Reserve(), m.Rule.Limits[1].Policy.Reserve(); a.On() || b != (limiter.Reserve{TTL: 5 * time.Minute, Estimate: 800}) {
		t.Errorf("list: reserves %+v and %+v, want none and {5m 800}", a, b)
	}
}

// TestReserveErrors: every mistake in a reserve, and every limit that
// cannot take one, is refused at its file:line:col with its reason (the
// limiter's wording for what the limiter refuses).
func TestReserveErrors(t *testing.T) {
	for _, tc := range []struct {
		name, rule, at, want string
	}{
		{"ttl too long", "{unit: hour, requests_per_unit: 10, reserve: {ttl: 25h}}", "25h", "rate_limit: reserve ttl must be whole milliseconds between 1ms and 24h0m0s"},
		{"ttl sub-ms", "{unit: hour, requests_per_unit: 10, reserve: {ttl: 1500us}}", "1500us", "reserve ttl must be whole milliseconds between 1ms and 24h0m0s"},
		{"ttl zero", "{unit: hour, requests_per_unit: 10, reserve: {ttl: 0s}}", "0s", "reserve ttl must be whole milliseconds between 1ms and 24h0m0s"},
		{"ttl negative", "{unit: hour, requests_per_unit: 10, reserve: {ttl: -1m}}", "-1m", "reserve ttl must be whole milliseconds between 1ms and 24h0m0s"},
		{"ttl not a duration", "{unit: hour, requests_per_unit: 10, reserve: {ttl: soon}}", "soon", `rate_limit: reserve.ttl "soon" is not a duration (e.g. 10m, 1h30m, 500ms)`},
		{"ttl not a string", "{unit: hour, requests_per_unit: 10, reserve: {ttl: [1m]}}", "[1m]", "reserve.ttl must be a string, got a list"},
		{"no ttl", "{unit: hour, requests_per_unit: 10, reserve: {estimate: 5}}", "{estimate", "rate_limit: reserve needs a ttl (e.g. ttl: 10m): how long a reservation is held when no settle comes"},
		{"empty", "{unit: hour, requests_per_unit: 10, reserve: {}}", "{}", "reserve needs a ttl"},
		{"null", "{unit: hour, requests_per_unit: 10, reserve: null}", "null", "reserve must be a mapping {ttl, estimate}, got null"},
		{"scalar", "{unit: hour, requests_per_unit: 10, reserve: 10m}", "10m", `reserve must be a mapping, got "10m"`},
		{"unknown key", "{unit: hour, requests_per_unit: 10, reserve: {ttl: 1m, estimat: 5}}", "estimat", `unknown key "estimat" in reserve (expected ttl, estimate)`},
		{"estimate negative", "{unit: hour, requests_per_unit: 10, reserve: {ttl: 1m, estimate: -1}}", "-1", "rate_limit: reserve estimate must be between 0 (the request's own cost) and 10 (the limit"},
		{"estimate above the limit", "{unit: hour, requests_per_unit: 10, reserve: {ttl: 1m, estimate: 11}}", "11", "reserve estimate must be between 0 (the request's own cost) and 10 (the limit"},
		{"estimate above the limit with charge always", "{unit: hour, requests_per_unit: 10, charge: always, reserve: {ttl: 1m, estimate: 11}}", "11", "reserve estimate must be between 0 (the request's own cost) and 10 (the limit"},
		{"estimate not an integer", "{unit: hour, requests_per_unit: 10, reserve: {ttl: 1m, estimate: 1.5}}", "1.5", `reserve.estimate must be an integer, got "1.5"`},
		{"estimate too large", "{unit: hour, requests_per_unit: 10, reserve: {ttl: 1m, estimate: 99999999999999999999}}", "999", `reserve.estimate must be an integer, got "99999999999999999999"`},
		{"concurrency", "{concurrency: 2, lease_ttl: 1m, reserve: {ttl: 1m}}", "reserve", "rate_limit: reserve is for rate limits; a concurrency limit holds leases of its own"},
		{"sliding_log", "{unit: hour, requests_per_unit: 10, algorithm: sliding_log, reserve: {ttl: 1m}}", "reserve", "reserve is not supported with sliding_log (its log keeps one entry per hit); use sliding_window"},
		{"penalty", "{unit: hour, requests_per_unit: 10, penalty: {duration: 1m}, reserve: {ttl: 1m}}", "reserve", "reserve cannot be combined with a penalty box"},
		{"unlimited", "{unlimited: true, reserve: {ttl: 1m}}", "reserve", "reserve is not allowed with unlimited: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "    rate_limit: "
			col := len(prefix) + 1 + strings.Index(tc.rule, tc.at)
			_, err := Load(ruleFile(t, "domain: d\ndescriptors:\n  - key: k\n"+prefix+tc.rule+"\n"), Options{Secret: testSecret})
			want := fmt.Sprintf("rules.yaml:4:%d: ", col)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v\nwant an error at %s containing %q", err, want, tc.want)
			}
		})
	}
}

// TestReserveNamedPolicyError: a reserve a named policy cannot take is
// refused once, in the policy, with its reason.
func TestReserveNamedPolicyError(t *testing.T) {
	text := "domain: d\npolicies:\n  log:\n    {unit: hour, requests_per_unit: 10, algorithm: sliding_log, reserve: {ttl: 1m}}\ndescriptors:\n  - key: k\n    policy: log\n"
	_, err := Load(ruleFile(t, text), Options{Secret: testSecret})
	if err == nil || !strings.Contains(err.Error(), "rules.yaml:4:") || !strings.Contains(err.Error(), "policies.log: reserve is not supported with sliding_log") {
		t.Fatalf("Load: %v", err)
	}
}

// TestReserveValidate: `envoy-rls validate` (Validate) reports a bad
// reserve at its position, and describes a good one in its summary.
func TestReserveValidate(t *testing.T) {
	bad := ruleFile(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n      reserve:\n        ttl: 1m\n        estimate: 50\n")
	if _, err := Validate(bad, Limits{}, nil); err == nil || !strings.Contains(err.Error(), "rules.yaml:9:19: rate_limit: reserve estimate must be between 0") {
		t.Errorf("Validate: %v, want the estimate refused at 9:19", err)
	}
	good := ruleFile(t, "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 20000, reserve: {ttl: 10m, estimate: 500}}\n"+
		"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 20000, reserve: {ttl: 10m}}\n")
	sum, err := Validate(good, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"policy d/tenant: fixed_window 20000 per hour, reserve 500 for 10m0s",
		"policy d/user: fixed_window 20000 per hour, reserve hits_addend for 10m0s",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}

// TestReserveInfo: the admin configuration (Domains, /config) shows a
// rule's reserve, and none on a rule without one.
func TestReserveInfo(t *testing.T) {
	s := loadText(t, "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 20000, reserve: {ttl: 10m, estimate: 500}}\n"+
		"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 20000}\n")
	js, err := json.Marshal(s.DomainsDigested())
	if err != nil {
		t.Fatal(err)
	}
	var ds []struct {
		Rules []struct {
			Path    string          `json:"path"`
			Reserve json.RawMessage `json:"reserve"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(js, &ds); err != nil || len(ds) != 1 || len(ds[0].Rules) != 2 {
		t.Fatalf("%s: %v", js, err)
	}
	for _, r := range ds[0].Rules {
		want := map[string]string{"d/tenant": `{"ttl":"10m0s","estimate":500}`, "d/user": ""}[r.Path]
		if string(r.Reserve) != want {
			t.Errorf("%s: reserve %s, want %q", r.Path, r.Reserve, want)
		}
	}
}
