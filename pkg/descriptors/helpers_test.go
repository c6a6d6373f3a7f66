package descriptors

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var testSecret = []byte("0123456789abcdef-test-secret")

func writeFile(t testing.TB, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rules is a rule file of domain d with one limit, rpu a second, on the
// key user.
func rules(rpu string) string {
	return "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: " + rpu + "}\n"
}

// ruleFile writes text as rules.yaml in a new directory and returns its
// path.
func ruleFile(t testing.TB, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, f, text)
	return f
}

// mustLoad loads the rules at path with testSecret, failing t on an error.
func mustLoad(t testing.TB, path string) *Snapshot {
	t.Helper()
	s, err := Load(path, Options{Secret: testSecret})
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	return s
}

// loadText loads text as a rule file (mustLoad).
func loadText(t testing.TB, text string) *Snapshot {
	t.Helper()
	return mustLoad(t, ruleFile(t, text))
}

// loadRules loads testdata/rules.
func loadRules(t testing.TB) *Snapshot {
	t.Helper()
	return mustLoad(t, "testdata/rules")
}

// e builds entries from "k=v" strings ("k=" is an empty value).
func e(kv ...string) []Entry {
	out := make([]Entry, len(kv))
	for i, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out[i] = Entry{Key: k, Value: v}
	}
	return out
}

// policyOf is the policy of the limited rule that entries ("k=v") match in
// domain d of s, failing t when there is none.
func policyOf(t testing.TB, s *Snapshot, entries ...string) *limiter.Policy {
	t.Helper()
	m, ok := s.Match("d", e(entries...))
	if !ok || m.Rule == nil || m.Rule.Policy == nil {
		t.Fatalf("%v matched no limited rule", entries)
	}
	return m.Rule.Policy
}

// settingRules is a rule file of domain d with, for each value, a
// descriptor keyed by the value whose rate limit (10 an hour) sets setting
// to it, then one keyed unset that sets nothing; more follows (descriptors,
// then any other top-level key).
func settingRules(setting string, values []string, more string) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for _, v := range values {
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: 10, %s: %s}\n", v, setting, v)
	}
	b.WriteString("  - key: unset\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	b.WriteString(more)
	return b.String()
}
