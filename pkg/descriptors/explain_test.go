package descriptors

import (
	"path/filepath"
	"strings"
	"testing"
)

const explainRules = `domain: ex
descriptors:
  - key: path
    value: /admin
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// TestExplain: each level says how it matched and what it passed over;
// no answer holds the request's values; an unmatched descriptor says why.
func TestExplain(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ex.yaml"), explainRules)
	s := mustLoad(t, dir)
	for _, tc := range []struct {
		name    string
		entries []Entry
		matched bool
		how     []string
		want    string // in the steps' Skipped or the Reason
	}{
		{"exact wins", e("path=/admin"), true, []string{howExact}, "an exact value wins"},
		{"wildcard then key-only", e("path=/api/secret-v", "user=secret-u"), true, []string{howWildcard, howKeyOnly}, "none equals the request's"},
		{"key-only", e("path=/secret-other"), true, []string{howKeyOnly}, `wildcard "/api/*"`},
		{"no such key", e("nokey=secret-v"), false, []string{howNone}, "no descriptor has this key"},
		{"rule not at the last depth", e("path=/api/secret-v"), false, []string{howWildcard}, "has no rate_limit"},
		{"too deep", e("path=/admin", "user=secret-u"), false, []string{howExact}, "no nested descriptors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := s.Explain("ex", tc.entries)
			if ex.Matched != tc.matched {
				t.Fatalf("matched %v, want %v (%+v)", ex.Matched, tc.matched, ex)
			}
			var text strings.Builder
			text.WriteString(ex.Reason)
			if len(ex.Steps) != len(tc.how) {
				t.Fatalf("steps %+v, want %v", ex.Steps, tc.how)
			}
			for i, st := range ex.Steps {
				if st.How != tc.how[i] {
					t.Fatalf("step %d: %+v, want %s", i, st, tc.how[i])
				}
				if st.How != howNone && !strings.HasPrefix(st.Source, filepath.Join(dir, "ex.yaml")+":") {
					t.Fatalf("step %d source %q", i, st.Source)
				}
				text.WriteString(strings.Join(st.Skipped, ";") + st.Pattern + st.Key + st.Source)
			}
			if !strings.Contains(text.String(), tc.want) {
				t.Fatalf("explanation %q lacks %q", text.String(), tc.want)
			}
			if strings.Contains(text.String(), "secret") {
				t.Fatalf("a request value in the explanation: %q", text.String())
			}
		})
	}
	if ex := s.Explain("nope", e("path=/admin")); ex.Matched || ex.Reason != "no rules for this domain" {
		t.Fatalf("unknown domain: %+v", ex)
	}
}
