package descriptors

import (
	"path/filepath"
	"testing"
	"time"
)

// TestExamplesLoad loads every file of config/examples, alone and together
// (make run serves the directory).
func TestExamplesLoad(t *testing.T) {
	const dir = "../../config/examples"
	files, err := filepath.Glob(dir + "/*.yaml")
	if err != nil || len(files) < 6 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		if _, err := Load(f, Options{Secret: testSecret}); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	s := mustLoad(t, dir)
	checks := []struct {
		domain  string
		entries []Entry
		path    string
	}{
		{"edge", e("remote_address=203.0.113.7"), "edge/remote_address"},
		{"edge", e("path=/downloads/a.zip"), "edge/path=*.zip"},
		{"api", e("route=/upload", "user=u1"), "api/route=/upload/user"},
		{"algorithms", e("route=/bucket"), "algorithms/route=/bucket"},
		{"penalty", e("login_user=alice"), "penalty/login_user"},
	}
	for _, c := range checks {
		m, ok := s.Match(c.domain, c.entries)
		if !ok || m.Rule.Path != c.path {
			t.Errorf("Match(%s, %v) = %v %v, want %s", c.domain, c.entries, ok, m.Rule, c.path)
		}
	}
	// 11-penalty.yaml: the login rule's box as written.
	if m, ok := s.Match("penalty", e("login_user=alice")); ok && m.Rule.Policy != nil {
		if pn := m.Rule.Policy.Penalty(); pn.Duration != 10*time.Minute || pn.MaxDuration != 24*time.Hour || pn.Decay != time.Hour {
			t.Errorf("penalty/login_user: penalty %+v", pn)
		}
	}
}
