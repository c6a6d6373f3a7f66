package xds

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
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
	fromXDS, err := compile([]*rlsconf.RateLimitConfig{sameRulesProto()}, testOpts)
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
			_, err := compile(tc.cs, testOpts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := compile(nil, testOpts); err != nil {
		t.Fatalf("no resources: %v", err)
	}
	if _, err := compile(nil, descriptors.Options{}); !errors.Is(err, descriptors.ErrSecret) {
		t.Fatalf("no secret: %v", err)
	}
}

func lim(u rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: u, RequestsPerUnit: n}
}

// nested is a chain of depth descriptors keyed k, the last one limited, as
// a resource and as the descriptors of a rule file.
func nested(depth int) ([]*rlsconf.RateLimitDescriptor, string) {
	d := &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: lim(rlsconf.RateLimitUnit_SECOND, 1)}
	var b strings.Builder
	for i := 0; i < depth; i++ {
		fmt.Fprintf(&b, "%s- key: k\n%s  descriptors:\n", strings.Repeat("    ", i), strings.Repeat("    ", i))
	}
	fmt.Fprintf(&b, "%s- key: k\n%s  rate_limit: {unit: second, requests_per_unit: 1}\n", strings.Repeat("    ", depth), strings.Repeat("    ", depth))
	for i := 0; i < depth; i++ {
		d = &rlsconf.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconf.RateLimitDescriptor{d}}
	}
	return []*rlsconf.RateLimitDescriptor{d}, b.String()
}

// A resource is refused for exactly the reasons the same rules in a rule
// file are, and each problem names the resource and the field at fault.
func TestRefusalsMatchFile(t *testing.T) {
	deep, deepYAML := nested(descriptors.MaxDepth)
	one := func(ds ...*rlsconf.RateLimitDescriptor) []*rlsconf.RateLimitConfig {
		return []*rlsconf.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: ds}}
	}
	for _, tc := range []struct {
		name  string
		cs    []*rlsconf.RateLimitConfig
		files map[string]string // rule files standing for cs, by resource name
		want  []string          // Problem.String() of each problem
		// at rewrites a line a file's reason names into the resource's field.
		at map[string]string
	}{
		{"unknown unit number", one(&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: lim(42, 1)}),
			map[string]string{"r": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: \"42\", requests_per_unit: 1}\n"},
			[]string{`xds:r:descriptors[0].rate_limit.unit: rate_limit: invalid rate limit unit "42" (expected second, minute, hour, day, week, month or year)`}, nil},
		{"no unit", one(&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}),
			map[string]string{"r": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n"},
			[]string{`xds:r:descriptors[0].rate_limit: rate_limit: unit is required (second, minute, hour, day, week, month or year)`}, nil},
		{"empty key and domain", []*rlsconf.RateLimitConfig{{Name: "r", Descriptors: []*rlsconf.RateLimitDescriptor{{RateLimit: lim(rlsconf.RateLimitUnit_SECOND, 1)}}}},
			map[string]string{"r": "domain: \"\"\ndescriptors:\n  - key: \"\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
			[]string{`xds:r:domain: domain must not be empty`, `xds:r:descriptors[0].key: descriptor key must not be empty`}, nil},
		{"unlimited with a rate", one(&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 5}}),
			map[string]string{"r": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: hour, requests_per_unit: 5}\n"},
			[]string{`xds:r:descriptors[0].rate_limit.unit: rate_limit: unit is not allowed with unlimited: true (an unlimited rule never limits)`,
				`xds:r:descriptors[0].rate_limit.requests_per_unit: rate_limit: requests_per_unit is not allowed with unlimited: true (an unlimited rule never limits)`}, nil},
		{"replaces", one(
			&rlsconf.RateLimitDescriptor{Key: "a", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1, Name: "a",
				Replaces: []*rlsconf.RateLimitReplace{{Name: "a"}, {}, {Name: "nobody"}}}}),
			map[string]string{"r": "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: a\n      replaces: [{name: a}, {name: \"\"}, {name: nobody}]\n"},
			[]string{`xds:r:descriptors[0].rate_limit.replaces[0]: replaces should not contain the name of the same descriptor ("a")`,
				`xds:r:descriptors[0].rate_limit.replaces[1]: should not have an empty replaces entry`,
				`xds:r:descriptors[0].rate_limit.replaces[2]: replaces names "nobody", but no rule in domain "d" has that name`}, nil},
		{"duplicate composite key", one(
			&rlsconf.RateLimitDescriptor{Key: "p", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", Value: "v", RateLimit: lim(rlsconf.RateLimitUnit_SECOND, 1)}}},
			&rlsconf.RateLimitDescriptor{Key: "p", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", Value: "v", RateLimit: lim(rlsconf.RateLimitUnit_SECOND, 2)}}}),
			map[string]string{"r": "domain: d\ndescriptors:\n  - key: p\n    descriptors:\n      - {key: k, value: v, rate_limit: {unit: second, requests_per_unit: 1}}\n  - key: p\n    descriptors:\n      - {key: k, value: v, rate_limit: {unit: second, requests_per_unit: 2}}\n"},
			[]string{`xds:r:descriptors[1]: duplicate descriptor composite key "d/p" (first defined at descriptors[0])`},
			map[string]string{"line 3": "descriptors[0]"}},
		{"duplicate domain", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}},
			map[string]string{"a": "domain: d\n", "b": "domain: d\n"},
			[]string{`xds:b:domain: duplicate domain "d": it is already defined in xds:a (one domain per file)`}, nil},
		{"too deep", one(deep...), map[string]string{"r": "domain: d\ndescriptors:\n" + deepYAML},
			[]string{`xds:r:descriptors` + strings.Repeat("[0].descriptors", descriptors.MaxDepth) + `: descriptors are nested more than 64 levels deep`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, y := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(y), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, ferr := descriptors.Load(dir, testOpts)
			_, xerr := compile(tc.cs, testOpts)
			var fce, xce *descriptors.ConfigError
			if !errors.As(ferr, &fce) || !errors.As(xerr, &xce) {
				t.Fatalf("file: %v\nxds: %v", ferr, xerr)
			}
			rewrite := []string{dir + "/", "xds:", ".yaml", ""}
			for line, field := range tc.at {
				rewrite = append(rewrite, line, field)
			}
			var fromFile, fromXDS []string
			for _, p := range fce.Problems {
				fromFile = append(fromFile, strings.NewReplacer(rewrite...).Replace(p.Reason))
			}
			var got []string
			for _, p := range xce.Problems {
				fromXDS = append(fromXDS, p.Reason)
				got = append(got, p.String())
			}
			if strings.Join(fromFile, "\n") != strings.Join(fromXDS, "\n") {
				t.Errorf("reasons differ:\nfile %q\nxds  %q", fromFile, fromXDS)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestCompileDefaultCharge: rules over xDS take the default charge as rules
// from files do (compatibility mode sets it from
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
func TestCompileDefaultCharge(t *testing.T) {
	for _, def := range []limiter.Charge{limiter.ChargeAllowed, limiter.ChargeAlways} {
		opts := testOpts
		opts.DefaultCharge = def
		s, err := compile([]*rlsconf.RateLimitConfig{sameRulesProto()}, opts)
		if err != nil {
			t.Fatal(err)
		}
		m, ok := s.Match("Edge Proxy", []descriptors.Entry{{Key: "remote_address", Value: "203.0.113.7"}})
		if !ok || m.Rule.Policy == nil || m.Rule.Policy.ChargeAlways() != (def == limiter.ChargeAlways) {
			t.Errorf("default %v: %v", def, m.Rule)
		}
	}
}
