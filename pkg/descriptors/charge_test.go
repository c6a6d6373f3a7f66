package descriptors

import (
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestChargeField: a rate limit's charge as written, else the default
// (Options.DefaultCharge), which a limit with a penalty box does not take;
// a bad value and charge: always with a penalty are refused at the key.
func TestChargeField(t *testing.T) {
	path := ruleFile(t, settingRules("charge", []string{"always", "allowed"},
		"  - key: boxed\n    rate_limit: {unit: hour, requests_per_unit: 10, penalty: {duration: 1m, max_duration: 1h, decay: 1h}}\n"))
	for _, def := range []limiter.Charge{limiter.ChargeAllowed, limiter.ChargeAlways} {
		s, err := Load(path, Options{Secret: testSecret, DefaultCharge: def})
		if err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]limiter.Charge{"always": limiter.ChargeAlways, "allowed": limiter.ChargeAllowed,
			"unset": def, "boxed": limiter.ChargeAllowed} {
			if got := policyOf(t, s, key+"=x").ChargeAlways(); got != (want == limiter.ChargeAlways) {
				t.Errorf("default %v, %s: charge always %v, want %v", def, key, got, want)
			}
		}
		if p := policyOf(t, s, "always=x"); p.MaxCost() != 20 {
			t.Errorf("charge always: max cost %d, want the ceiling 20", p.MaxCost())
		}
	}
	for text, want := range map[string]string{
		"rate_limit: {unit: hour, requests_per_unit: 10, charge: never}":                                                        `:4:53: rate_limit: charge "never" is not one of allowed, always`,
		"rate_limit: {unit: hour, requests_per_unit: 10, charge: always, penalty: {duration: 1m, max_duration: 1h, decay: 1h}}": ":4:53: rate_limit: charge always cannot be combined with a penalty box",
		"rate_limit: {unit: hour, requests_per_unit: 600, algorithm: sliding_log, charge: always}":                              "sliding_log with charge always",
	} {
		_, err := Load(ruleFile(t, "domain: d\ndescriptors:\n  - key: k\n    "+text+"\n"), Options{Secret: testSecret})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}

// TestOverrideCharge: the policies that request-supplied overrides make
// take the default charge too (compatibility mode counts their denied hits
// as the reference does), a limit of 0 included.
func TestOverrideCharge(t *testing.T) {
	path := ruleFile(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	for _, def := range []limiter.Charge{limiter.ChargeAllowed, limiter.ChargeAlways} {
		s, err := Load(path, Options{Secret: testSecret, DefaultCharge: def})
		if err != nil {
			t.Fatal(err)
		}
		for _, rpu := range []uint32{0, 5} {
			m, ok := s.Override("d", e("tenant=t1"), rpu, UnitHour, 1)
			if !ok {
				t.Fatalf("default %v, limit %d: no override", def, rpu)
			}
			if got := m.Rule.Policy.ChargeAlways(); got != (def == limiter.ChargeAlways) {
				t.Errorf("default %v, limit %d: the override charges always: %v", def, rpu, got)
			}
		}
	}
}
