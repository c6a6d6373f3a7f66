package descriptors

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

const severalLimits = `domain: api
descriptors:
  - key: api_key
    rate_limits:
      - unit: second
        requests_per_unit: 10
      - unit: day
        requests_per_unit: 1000
        algorithm: sliding_window
        failure_mode: open
        headers: retry_after
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 100, name: tenant_burst}
      - {unit: hour, requests_per_unit: 5000, name: tenant_hourly, revision: 2}
`

func TestRateLimitsCompile(t *testing.T) {
	s := loadText(t, severalLimits)
	m, ok := s.Match("api", e("api_key=k1"))
	if !ok {
		t.Fatal("no match")
	}
	limits := m.Rule.Limits
	if len(limits) != 2 || limits[0] != m.Rule || len(m.Subjects) != 2 || m.Subjects[0] != m.Subject {
		t.Fatalf("limits %v subjects %d", limits, len(m.Subjects))
	}
	first, second := limits[0], limits[1]
	if first.RequestsPerUnit != 10 || first.Unit != UnitSecond || first.Policy.Algorithm() != limiter.FixedWindow || first.Policy.FailureMode() != limiter.FailClosed || first.Headers != HeadersDefault {
		t.Errorf("first limit %+v", first)
	}
	if second.RequestsPerUnit != 1000 || second.Unit != UnitDay || second.Policy.Algorithm() != limiter.SlidingWindow || second.Policy.FailureMode() != limiter.FailOpen || second.Headers != HeadersRetryAfter || second.LimitIndex != 1 {
		t.Errorf("second limit %+v", second)
	}
	if first.Policy.ID() != "api/api_key" || second.Policy.ID() != "api/api_key::1" {
		t.Errorf("IDs %q %q", first.Policy.ID(), second.Policy.ID())
	}
	if first.StatKey != "api.api_key" || second.StatKey != "api.api_key.rate_limits_1" {
		t.Errorf("stat keys %q %q", first.StatKey, second.StatKey)
	}
	if m.Subjects[1] == m.Subject {
		t.Error("the limits share a subject digest")
	}
	if want := s.subject(second.Policy.ID(), e("api_key=k1"), nil); m.Subjects[1] != want {
		t.Error("the second subject is not HMAC(its policy ID, entries)")
	}
	var tag limiter.Tag
	copy(tag[:], m.Subject[:8])
	if m.Tag != tag {
		t.Errorf("tag %x, want the first subject's %x", m.Tag, tag)
	}

	// A single rate_limit: no Limits, no Subjects, zero Tag.
	m, ok = s.Match("api", e("user=u"))
	if !ok || m.Rule.Limits != nil || m.Subjects != nil || m.Tag != (limiter.Tag{}) {
		t.Errorf("single limit match %+v", m)
	}

	// Named limits take their names' IDs; revision stays per limit.
	m, _ = s.Match("api", e("tenant=t"))
	if m.Rule.Limits[0].Policy.ID() != "api:tenant_burst" || m.Rule.Limits[1].Policy.ID() != "api:tenant_hourly" || m.Rule.Limits[1].Policy.Revision() != 2 || m.Rule.Limits[0].Policy.Revision() != 1 {
		t.Errorf("named limits %q %q", m.Rule.Limits[0].Policy.ID(), m.Rule.Limits[1].Policy.ID())
	}
}

// TestRateLimitsIDsAreStable: the first limit of a list keeps the ID a
// single rate_limit on the descriptor has (turning one limit into a list
// keeps its counters); the others derive from the path and their index, or
// from their name; reordering named limits keeps every ID.
func TestRateLimitsIDsAreStable(t *testing.T) {
	single := loadText(t, "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	list := loadText(t, "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: minute, requests_per_unit: 2}\n      - {unit: hour, requests_per_unit: 3}\n")
	ms, _ := single.Match("d", e("k=v"))
	ml, _ := list.Match("d", e("k=v"))
	if ms.Rule.Policy.ID() != "d/k:v" || ml.Rule.Policy.ID() != ms.Rule.Policy.ID() || ml.Subject != ms.Subject {
		t.Errorf("single %q, first of list %q", ms.Rule.Policy.ID(), ml.Rule.Policy.ID())
	}
	for i, want := range []string{"d/k:v", "d/k:v::1", "d/k:v::2"} {
		if got := ml.Rule.Limits[i].Policy.ID(); got != want {
			t.Errorf("limit %d: ID %q, want %q", i, got, want)
		}
	}
	// Lossy strings fall back to a hash that covers the index.
	lossy := loadText(t, "domain: D\ndescriptors:\n  - key: K\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: minute, requests_per_unit: 2}\n")
	m, _ := lossy.Match("D", e("K=x"))
	a, b := m.Rule.Limits[0].Policy.ID(), m.Rule.Limits[1].Policy.ID()
	if a == b || !strings.HasPrefix(b, "d/k::1--") || len(b) > limiter.MaxPolicyIDLength {
		t.Errorf("lossy IDs %q %q", a, b)
	}
	ab := loadText(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1, name: a}\n      - {unit: minute, requests_per_unit: 2, name: b}\n")
	ba := loadText(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 2, name: b}\n      - {unit: second, requests_per_unit: 1, name: a}\n")
	m1, _ := ab.Match("d", e("k=x"))
	m2, _ := ba.Match("d", e("k=x"))
	if m1.Rule.Limits[0].Policy.ID() != m2.Rule.Limits[1].Policy.ID() || m1.Rule.Limits[1].Policy.ID() != m2.Rule.Limits[0].Policy.ID() || m1.Subjects[0] != m2.Subjects[1] {
		t.Error("reordering named limits changed their IDs or subjects")
	}
}

func TestRateLimitsInvalid(t *testing.T) {
	many := "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n" + strings.Repeat("      - {unit: second, requests_per_unit: 1}\n", maxLimitsPerDescriptor+1)
	tests := map[string]struct {
		text  string
		wants []want
	}{
		"both": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {unit: minute, requests_per_unit: 2}\n",
			[]want{{5, 5, "either rate_limit or rate_limits, not both"}}},
		"both, rate_limit null": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 2}\n    rate_limit:\n",
			[]want{{4, 5, "either rate_limit or rate_limits, not both"}}},
		"with policy": {"domain: d\npolicies:\n  p: {unit: second, requests_per_unit: 1}\ndescriptors:\n  - key: k\n    policy: p\n    rate_limits:\n      - {unit: minute, requests_per_unit: 2}\n",
			[]want{{7, 5, "either policy or rate_limits, not both"}}},
		"empty": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n",
			[]want{{4, 18, "rate_limits must not be empty"}}},
		"null": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n",
			[]want{{4, 17, "rate_limits must be a list of rate_limit mappings, got null"}}},
		"mapping": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits: {unit: second, requests_per_unit: 1}\n",
			[]want{{4, 18, "rate_limits must be a list of rate_limit mappings, got a mapping"}}},
		"too many": {many,
			[]want{{5, 7, "rate_limits lists 17 limits; a descriptor takes at most 16"}}},
		"entry not a mapping": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - 10\n      -\n",
			[]want{{6, 9, "rate_limits[1] must be a mapping, got \"10\""}, {7, 8, "rate_limits[2] must be a mapping, got null"}}},
		"unknown key": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: second, requests_per_units: 1}\n",
			[]want{{6, 24, `unknown key "requests_per_units" in rate_limits[1]`}}},
		"bad entries": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: fortnight, requests_per_unit: 1}\n      - {requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 1, burst: 3}\n",
			[]want{{5, 10, `rate_limits[0]: invalid rate limit unit "fortnight"`}, {6, 9, "rate_limits[1]: unit is required"}, {7, 46, "rate_limits[2]: burst is only valid with algorithm"}}},
		"unlimited": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unlimited: true}\n",
			[]want{{5, 10, "rate_limits[0]: unlimited is not allowed in rate_limits"}}},
		"quota mode": {"domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n",
			[]want{{5, 5, "quota_mode is not supported with rate_limits"}}},
		"replaces itself": {"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n",
			[]want{{5, 66, "replaces should not contain the name of the same descriptor"}}},
		"colocate unknown": {"domain: d\ndescriptors:\n  - key: k\n    colocate: tenant\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: minute, requests_per_unit: 2}\n",
			[]want{{4, 5, `colocate names "tenant"`}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkProblems(t, ruleFile(t, tc.text), tc.wants)
		})
	}
}

func TestRateLimitsInfoAndSummary(t *testing.T) {
	s := loadText(t, severalLimits)
	d := s.Domains()[0]
	if len(d.Rules) != 5 {
		t.Fatalf("%d rules", len(d.Rules))
	}
	r := d.Rules[1]
	if r.Path != "api/api_key" || r.PolicyID != "api/api_key::1" || r.LimitIndex != 1 || r.LimitCount != 2 || r.Unit != "day" || r.RequestsPerUnit != 1000 {
		t.Errorf("rule info %+v", r)
	}
	if d.Rules[2].LimitCount != 0 {
		t.Errorf("single limit info %+v", d.Rules[2])
	}
	sum := s.Summary()
	for _, want := range []string{
		"5 rule(s) (5 limited)",
		"policy api/api_key: fixed_window 10 per second [rate_limits[0] of 2]",
		"policy api/api_key::1: sliding_window 1000 per day, fails open, headers retry_after [rate_limits[1] of 2]",
		"policy api:tenant_hourly: fixed_window 5000 per hour, revision 2 [rate_limits[1] of 2, name=tenant_hourly]",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}

// TestRateLimitsBound: a list of exactly MaxLimitsPerDescriptor loads, each
// limit with a distinct ID.
func TestRateLimitsBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n")
	for i := 0; i < maxLimitsPerDescriptor; i++ {
		b.WriteString("      - {unit: second, requests_per_unit: " + strconv.Itoa(i+1) + "}\n")
	}
	s := loadText(t, b.String())
	m, _ := s.Match("d", e("k=x"))
	seen := map[string]bool{}
	for _, r := range m.Rule.Limits {
		seen[r.Policy.ID()] = true
	}
	if len(seen) != maxLimitsPerDescriptor {
		t.Errorf("%d distinct IDs", len(seen))
	}
}

// TestPolicies: Snapshot.Policies lists the policy of every limited rule,
// each limit of a rate_limits list included, and nothing for an unlimited
// one.
func TestPolicies(t *testing.T) {
	s := loadText(t, severalLimits+"  - key: free\n    rate_limit: {unlimited: true}\n")
	var got []string
	for _, p := range s.Policies() {
		got = append(got, fmt.Sprintf("%s@%d", p.ID(), p.Revision()))
	}
	want := []string{"api/api_key@1", "api/api_key::1@1", "api/user@1", "api:tenant_burst@1", "api:tenant_hourly@2"}
	if !slices.Equal(got, want) {
		t.Errorf("Policies: %v, want %v", got, want)
	}
	if (*Snapshot)(nil).Policies() != nil {
		t.Error("a nil snapshot has policies")
	}
}
