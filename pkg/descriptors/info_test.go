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
	sum, err := Validate("testdata/rules", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OK: 3 file(s), 3 domain(s)", "domain ref (testdata/rules/reference.yaml)", "policy ref/database:users: fixed_window 500 per second", "unlimited", "uses policy login", "5 minutes"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}
