package descriptors

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzLoad feeds arbitrary bytes to the loader: it must return a snapshot or
// a *ConfigError, never panic, and a snapshot it returns must answer.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"testdata/rules", "testdata/invalid", "testdata/compat"} {
		files, _ := filepath.Glob(dir + "/*.yaml")
		for _, name := range files {
			if data, err := os.ReadFile(name); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(severalLimits))
	if data, err := os.ReadFile("../../config/examples/08-several-limits.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		// A smaller work budget than maxNodes keeps each run short; the code
		// path is the same.
		s, err := buildBudget([]source{{name: "fuzz.yaml", data: data}}, Options{Secret: testSecret}, Limits{}.withDefaults(), 20_000)
		if err != nil {
			if _, ok := err.(*ConfigError); !ok {
				t.Fatalf("error %T is not a *ConfigError: %v", err, err)
			}
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for _, d := range s.Domains() {
			for _, r := range d.Rules {
				var entries []Entry
				for _, seg := range strings.Split(strings.TrimPrefix(r.Path, d.Domain+"/"), "/") {
					k, v, _ := strings.Cut(seg, "=")
					entries = append(entries, Entry{Key: k, Value: v})
				}
				s.Match(d.Domain, entries)
				s.Override(d.Domain, entries, 1, UnitSecond, 1)
			}
		}
		_ = s.Summary()
	})
}

// FuzzMatch matches arbitrary descriptors against the test rules, and checks
// the wildcard matcher against a regular expression built from the pattern.
func FuzzMatch(f *testing.F) {
	f.Add("ref", "remote_address", "10.0.0.1", "", "", "a*b*c", "axxbyyc")
	f.Add("wild", "path", "/a1/b2/c", "user", "x", "*", "")
	f.Add("wild", "cluster", "eu-west", "user", "u", "**", "a")
	f.Add("ref", "message_type", "marketing", "to_number", "1", "a*a", "a")
	f.Add("ext", "route", "/login", "", "", "*.png", ".png")
	s := loadRules(f)
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2, pattern, value string) {
		entries := []Entry{{k1, v1}}
		if k2 != "" {
			entries = append(entries, Entry{k2, v2})
		}
		if m, ok := s.Match(domain, entries); ok {
			if m.Rule == nil || (!m.Rule.Unlimited && m.Rule.Policy == nil) {
				t.Fatalf("match without a usable rule: %+v", m)
			}
			again, _ := s.Match(domain, entries)
			if again.Subject != m.Subject {
				t.Fatal("subject is not deterministic")
			}
		}
		if m, ok := s.Override(domain, entries, 10, UnitMinute, 1); ok && m.Rule.Policy.Limit() != 10 {
			t.Fatalf("override limit %d", m.Rule.Policy.Limit())
		}
		if strings.Contains(pattern, "*") && len(pattern) < 64 && len(value) < 256 && utf8.ValidString(pattern) && utf8.ValidString(value) {
			parts := strings.Split(pattern, "*")
			quoted := make([]string, len(parts))
			for i, p := range parts {
				quoted[i] = regexp.QuoteMeta(p)
			}
			re := regexp.MustCompile(`^(?s:` + strings.Join(quoted, ".*") + `)$`)
			if got, want := globMatch(parts, value), re.MatchString(value); got != want {
				t.Fatalf("globMatch(%q, %q) = %v, regexp says %v", pattern, value, got, want)
			}
		}
	})
}
