package descriptors

import (
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestPenaltyParse: `penalty:` reaches the policy, with its defaults, on
// an inline rate_limit and on a named policy.
func TestPenaltyParse(t *testing.T) {
	s := loadText(t, `domain: d
policies:
  boxed: {unit: minute, requests_per_unit: 5, penalty: {duration: 10m, max_duration: 24h, decay: 1h}}
descriptors:
  - key: full
    rate_limit:
      unit: second
      requests_per_unit: 1
      algorithm: sliding_window
      penalty: {duration: 1500ms, max_duration: 3s, decay: 0s}
  - key: short
    rate_limit: {unit: second, requests_per_unit: 1, penalty: {duration: 30s}}
  - key: named
    policy: boxed
  - key: none
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	for key, want := range map[string]limiter.Penalty{
		"full":  {Duration: 1500 * time.Millisecond, MaxDuration: 3 * time.Second},
		"short": {Duration: 30 * time.Second, MaxDuration: 30 * time.Second},
		"named": {Duration: 10 * time.Minute, MaxDuration: 24 * time.Hour, Decay: time.Hour},
		"none":  {},
	} {
		if got := policyOf(t, s, key+"=x").Penalty(); got != want {
			t.Errorf("%s: penalty %+v, want %+v", key, got, want)
		}
	}
}

// TestPenaltyErrors: every mistake is reported at its file:line:col.
func TestPenaltyErrors(t *testing.T) {
	for _, tc := range []struct {
		name, rule, want string
	}{
		{"no duration", "{unit: second, requests_per_unit: 1, penalty: {decay: 1h}}", ":4:"},
		{"not a duration", "{unit: second, requests_per_unit: 1, penalty: {duration: ten}}", `penalty.duration "ten" is not a duration`},
		{"zero", "{unit: second, requests_per_unit: 1, penalty: {duration: 0s}}", "penalty.duration 0s must be positive"},
		{"sub-ms", "{unit: second, requests_per_unit: 1, penalty: {duration: 1500us}}", "whole milliseconds"},
		{"negative decay", "{unit: second, requests_per_unit: 1, penalty: {duration: 1s, decay: -1s}}", "penalty.decay -1s must not be negative"},
		{"too long", "{unit: second, requests_per_unit: 1, penalty: {duration: 721h}}", "above the maximum 720h0m0s (30 days)"},
		{"max below", "{unit: second, requests_per_unit: 1, penalty: {duration: 1h, max_duration: 1m}}", "penalty.max_duration 1m0s is below the duration 1h0m0s"},
		{"unknown key", "{unit: second, requests_per_unit: 1, penalty: {duration: 1s, lenght: 2s}}", `unknown key "lenght" in penalty`},
		{"not a mapping", "{unit: second, requests_per_unit: 1, penalty: 10m}", "penalty must be a mapping"},
		{"zero limit", "{unit: second, requests_per_unit: 0, penalty: {duration: 1s}}", "penalty needs a limit above 0"},
		{"unlimited", "{unlimited: true, penalty: {duration: 1s}}", "penalty is not allowed with unlimited: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(ruleFile(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: "+tc.rule+"\n"), Options{Secret: testSecret})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rules.yaml:4:") {
				t.Fatalf("Load: %v, want an error at rules.yaml:4 containing %q", err, tc.want)
			}
		})
	}
}
