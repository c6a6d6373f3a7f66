package descriptors

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDomainsAndSummary(t *testing.T) {
	s := loadRules(t)
	ds := s.Domains()
	if len(ds) != 3 || ds[0].Domain != "ext" || ds[1].Domain != "ref" || ds[2].Domain != "wild" {
		t.Fatalf("domains = %+v", ds)
	}
	js, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), string(testSecret)) {
		t.Errorf("the secret leaks into Domains()")
	}
	var found bool
	for _, r := range ds[0].Rules {
		if r.Path == "ext/route=/search" {
			found = true
			if r.PolicyID != "ext:search" || r.Algorithm != "fixed_window" || r.Revision != 3 || r.Headers != "none" || r.Metadata["owner"] != "search-team" {
				t.Errorf("rule info = %+v", r)
			}
		}
	}
	if !found {
		t.Errorf("ext/route=/search missing")
	}
	if got := strings.Join(ds[0].Policies, ","); got != "login,bucket" {
		t.Errorf("policies = %q", got)
	}
	sum, err := Validate("testdata/rules", Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OK: 3 file(s), 3 domain(s)", "domain ref (testdata/rules/reference.yaml)", "policy ref/database:users: fixed_window 500 per second", "unlimited", "uses policy login", "5 minutes"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}

// TestDomainsDigested: every configured value of a rule path becomes its
// digest, a policy ID made from such a path too, while a named rule keeps
// its ID; one value has one digest under one secret, and another secret
// gives another.
func TestDomainsDigested(t *testing.T) {
	const rules = `domain: d
descriptors:
  - key: api_key
    value: sk_live_SECRET123
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: remote_address
    value: 10.1.2.3
    rate_limit: {unit: second, requests_per_unit: 1, name: office}
  - key: remote_address
    value: 10.1.2.4
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1}
`
	s := loadText(t, rules)
	ds := s.DomainsDigested()
	js, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{"SECRET123", "secret123", "10.1.2.3", "10.1.2.4", "10_1_2"} {
		if strings.Contains(string(js), raw) {
			t.Fatalf("%s in the digested view:\n%s", raw, js)
		}
	}
	r := ds[0].Rules
	dig := s.configDigest('v', "api_key", "sk_live_SECRET123")
	if len(dig) != len("hmac:")+16 || r[0].Path != "d/api_key="+dig || !strings.HasPrefix(r[0].PolicyID, "hmac:") {
		t.Fatalf("rule 0: %+v (digest %s)", r[0], dig)
	}
	if r[1].PolicyID != "d:office" || !strings.HasPrefix(r[1].Path, "d/remote_address=hmac:") {
		t.Fatalf("a named rule: %+v", r[1])
	}
	if !strings.HasSuffix(r[2].Path, "/path") || r[2].Path == r[1].Path {
		t.Fatalf("a nested rule: %+v", r[2])
	}
	if r[3].Path != "d/user" || r[3].PolicyID != "d/user" {
		t.Fatalf("a rule without a value is as it is: %+v", r[3])
	}
	full := s.Domains()[0].Rules
	if full[0].Path != "d/api_key=sk_live_SECRET123" {
		t.Fatalf("Domains changed: %+v", full[0])
	}
	other, err := Load(ruleFile(t, rules), Options{Secret: []byte("another-secret-0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	if again := loadText(t, rules).DomainsDigested()[0].Rules[0].Path; again != r[0].Path {
		t.Fatalf("the same value and secret: %s, then %s", r[0].Path, again)
	}
	if o := other.DomainsDigested()[0].Rules[0].Path; o == r[0].Path {
		t.Fatalf("another secret, the same digest %s", o)
	}
}
