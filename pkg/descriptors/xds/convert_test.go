package xds

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

var testOpts = descriptors.Options{Secret: []byte("0123456789abcdef0123456789abcdef")}

// sameRules as a rule file and as a RateLimitConfig.
const sameRulesYAML = `domain: Edge Proxy
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: path
    value: /login
    shadow_mode: true
    rate_limit:
      name: login
      unit: MINUTE
      requests_per_unit: 5
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit:
          unit: hour
          requests_per_unit: 100
          replaces:
            - name: login
  - key: internal
    rate_limit:
      unlimited: true
  - key: tenant
    value: "a: b, c"
    rate_limit:
      unit: day
      requests_per_unit: 1000
`

func sameRulesProto() *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "edge", Domain: "Edge Proxy", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 10}},
		{Key: "path", Value: "/login", ShadowMode: true,
			RateLimit: &rlsconf.RateLimitPolicy{Name: "login", Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 5},
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "user", DetailedMetric: true,
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 100, Replaces: []*rlsconf.RateLimitReplace{{Name: "login"}}}}}},
		{Key: "internal", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		{Key: "tenant", Value: "a: b, c", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 1000}},
	}}
}

// A RateLimitConfig compiles to the rules, policy IDs and flags of the same
// rules in a file.
func TestCompileMatchesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(sameRulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := descriptors.Load(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	fromXDS, err := Compile([]*rlsconf.RateLimitConfig{sameRulesProto()}, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	fd, xd := fromFile.Domains(), fromXDS.Domains()
	if len(fd) != 1 || len(xd) != 1 || fd[0].Domain != xd[0].Domain {
		t.Fatalf("domains: file %d, xds %d", len(fd), len(xd))
	}
	if len(fd[0].Rules) != 5 || len(fd[0].Rules) != len(xd[0].Rules) {
		t.Fatalf("rules: file %d, xds %d", len(fd[0].Rules), len(xd[0].Rules))
	}
	for i := range fd[0].Rules {
		f, x := fd[0].Rules[i], xd[0].Rules[i]
		f.Source, x.Source = "", ""
		if f.Path != x.Path || f.PolicyID != x.PolicyID || f.Name != x.Name || strings.Join(f.Replaces, ",") != strings.Join(x.Replaces, ",") ||
			f.Unlimited != x.Unlimited || f.RequestsPerUnit != x.RequestsPerUnit || f.Unit != x.Unit ||
			f.ShadowMode != x.ShadowMode || f.DetailedMetric != x.DetailedMetric {
			t.Errorf("rule %d:\nfile %+v\nxds  %+v", i, f, x)
		}
	}
	// Matching gives the same policy and subject digest.
	entries := []descriptors.Entry{{Key: "path", Value: "/login"}, {Key: "user", Value: "u1"}}
	fm, ok1 := fromFile.Match("Edge Proxy", entries)
	xm, ok2 := fromXDS.Match("Edge Proxy", entries)
	if !ok1 || !ok2 || fm.Rule.Policy.ID() != xm.Rule.Policy.ID() || fm.Subject != xm.Subject {
		t.Fatalf("match: file %v %v, xds %v %v", ok1, fm.Rule, ok2, xm.Rule)
	}
}

func TestCompileRefuses(t *testing.T) {
	deep := &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}}
	for i := 0; i < descriptors.MaxDepth+1; i++ {
		deep = &rlsconf.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconf.RateLimitDescriptor{deep}}
	}
	for _, tc := range []struct {
		name string
		cs   []*rlsconf.RateLimitConfig
		want string
	}{
		{"no unit", []*rlsconf.RateLimitConfig{{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}}}}, "unit"},
		{"unknown unit number", []*rlsconf.RateLimitConfig{{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: 42, RequestsPerUnit: 1}}}}}, "unit"},
		{"empty key", []*rlsconf.RateLimitConfig{{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}}}, "key"},
		{"empty domain", []*rlsconf.RateLimitConfig{{Name: "x"}}, "domain"},
		{"duplicate domain", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}}, "duplicate domain"},
		{"duplicate name", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "d"}, {Name: "a", Domain: "e"}}, "two resources"},
		{"too deep", []*rlsconf.RateLimitConfig{{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{deep}}}, "nested"},
		{"nil", []*rlsconf.RateLimitConfig{nil}, "nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.cs, testOpts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := Compile(nil, testOpts); err != nil {
		t.Fatalf("no resources: %v", err)
	}
	if _, err := Compile(nil, descriptors.Options{}); !errors.Is(err, descriptors.ErrSecret) {
		t.Fatalf("no secret: %v", err)
	}
}
