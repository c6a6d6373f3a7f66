package descriptors

import (
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func TestConcurrencyRule(t *testing.T) {
	s := loadText(t, `
domain: ai
descriptors:
  - key: tenant
    rate_limit:
      concurrency: 8
      lease_ttl: 15m
      failure_mode: open
`)
	m, ok := s.Match("ai", e("tenant=t1"))
	if !ok || m.Rule.Policy == nil {
		t.Fatalf("no match: %v", ok)
	}
	p := m.Rule.Policy
	if !p.Leases() || p.Algorithm() != limiter.Concurrency || p.Limit() != 8 || p.LeaseTTLMillis() != (15*time.Minute).Milliseconds() ||
		p.FailureMode() != limiter.FailOpen || m.Rule.RequestsPerUnit != 8 || m.Rule.Window() != 15*time.Minute {
		t.Errorf("policy %s: %v limit %d ttl %d", p.ID(), p.Algorithm(), p.Limit(), p.LeaseTTLMillis())
	}
	if want := "concurrency 8 in flight, lease_ttl 15m0s"; !strings.Contains(s.Summary(), want) {
		t.Errorf("summary does not say %q:\n%s", want, s.Summary())
	}
}

func TestConcurrencyRuleErrors(t *testing.T) {
	for _, c := range []struct {
		limit, want string
	}{
		{"concurrency: 2", "concurrency needs a lease_ttl"},
		{"lease_ttl: 1m", "lease_ttl needs concurrency: N"},
		{"concurrency: 2\n      lease_ttl: 1m\n      unit: second", "unit is not allowed with concurrency"},
		{"concurrency: 2\n      lease_ttl: 1m\n      requests_per_unit: 3", "requests_per_unit is not allowed with concurrency"},
		{"concurrency: 2\n      lease_ttl: 1m\n      algorithm: token_bucket", "algorithm is not allowed with concurrency"},
		{"concurrency: 2\n      lease_ttl: 1m\n      penalty: {duration: 1m}", "penalty is not allowed with concurrency"},
		{"concurrency: 2\n      lease_ttl: soon", `lease_ttl "soon" is not a duration`},
		{"concurrency: 2\n      lease_ttl: 25h", "lease_ttl 25h0m0s must be whole milliseconds between 1ms and 24h0m0s"},
		{"concurrency: 2\n      lease_ttl: 1500us", "must be whole milliseconds"},
		{"concurrency: 20000\n      lease_ttl: 1m", "concurrency must be between 0 and 10000"},
		{"unlimited: true\n      concurrency: 2", "concurrency is not allowed with unlimited"},
		{"concurrency: 2\n      lease_ttl: 1m\n      charge: always", "charge is not allowed with concurrency"},
	} {
		text := "domain: ai\ndescriptors:\n  - key: tenant\n    rate_limit:\n      " + c.limit + "\n"
		_, err := Load(ruleFile(t, text), Options{Secret: testSecret})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.limit, err, c.want)
		}
	}
}

// TestConcurrencyTakesNoDefaultCharge: the service's default charge
// (compatibility mode's `always`) applies to rate limits, never to a
// concurrency limit, whose leases are held and given back.
func TestConcurrencyTakesNoDefaultCharge(t *testing.T) {
	text := "domain: ai\ndescriptors:\n  - key: tenant\n    rate_limit: {concurrency: 2, lease_ttl: 1m}\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	s, err := Load(ruleFile(t, text), Options{Secret: testSecret, DefaultCharge: limiter.ChargeAlways})
	if err != nil {
		t.Fatal(err)
	}
	lease, ok := s.Match("ai", e("tenant=t1"))
	if !ok || !lease.Rule.Policy.Leases() || lease.Rule.Policy.ChargeAlways() {
		t.Errorf("concurrency limit: matched %v, charges %v; want a lease policy that does not charge", ok, ok && lease.Rule.Policy.ChargeAlways())
	}
	rate, ok := s.Match("ai", e("user=u1"))
	if !ok || !rate.Rule.Policy.ChargeAlways() {
		t.Errorf("rate limit beside it: matched %v, want the default charge always", ok)
	}
}
