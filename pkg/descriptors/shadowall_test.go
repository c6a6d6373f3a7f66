package descriptors

import "testing"

// TestShadowAll: Options.ShadowAll puts every limited rule in shadow
// mode, rule and policy alike, and keeps the policy IDs (the counters).
func TestShadowAll(t *testing.T) {
	plain := mustLoad(t, "testdata/rules")
	s, err := Load("testdata/rules", Options{Secret: testSecret, ShadowAll: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain  string
		entries []Entry
	}{
		{"ref", e("service=a", "user=user-b")},
		{"ref", e("database=users")},
		{"ext", e("route=/login")},
	} {
		m, ok := s.Match(tc.domain, tc.entries)
		if !ok || m.Rule.Policy == nil {
			t.Fatalf("%v: no limited match", tc.entries)
		}
		if !m.Rule.ShadowMode || !m.Rule.Policy.Shadow() {
			t.Errorf("%v: shadow mode %v, policy shadow %v; want both", tc.entries, m.Rule.ShadowMode, m.Rule.Policy.Shadow())
		}
		p, _ := plain.Match(tc.domain, tc.entries)
		if p.Rule.Policy.Shadow() {
			t.Errorf("%v: shadow without ShadowAll", tc.entries)
		}
		if p.Rule.Policy.ID() != m.Rule.Policy.ID() {
			t.Errorf("%v: policy ID %q with ShadowAll, %q without", tc.entries, m.Rule.Policy.ID(), p.Rule.Policy.ID())
		}
	}
}
