package descriptors

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
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
	}
	for _, c := range checks {
		m, ok := s.Match(c.domain, c.entries)
		if !ok || m.Rule.Path != c.path {
			t.Errorf("Match(%s, %v) = %v %v, want %s", c.domain, c.entries, ok, m.Rule, c.path)
		}
	}
}

// TestCalendarExample: config/examples/09-calendar.yaml builds calendar
// fixed windows in their zones, with IDs that name the calendar.
func TestCalendarExample(t *testing.T) {
	s := mustLoad(t, "../../config/examples/09-calendar.yaml")
	for _, c := range []struct {
		entry string
		unit  limiter.CalendarUnit
		zone  string
	}{
		{"api_key=k1", limiter.CalendarMonth, "Europe/Berlin"},
		{"export_user=u1", limiter.CalendarDay, "America/New_York"},
		{"partner=p1", limiter.CalendarWeek, "UTC"},
	} {
		m, ok := s.Match("calendar", e(c.entry))
		if !ok {
			t.Fatalf("%s: no match", c.entry)
		}
		p := m.Rule.Policy
		cal := p.Calendar()
		if cal == nil || cal.Unit != c.unit || cal.Location.String() != c.zone || p.Algorithm() != limiter.FixedWindow {
			t.Errorf("%s: policy %s calendar %+v", c.entry, p.ID(), cal)
		}
		if !strings.Contains(p.ID(), ":calendar:"+c.unit.String()+":") {
			t.Errorf("%s: ID %q does not name the calendar", c.entry, p.ID())
		}
		if want := "per " + c.unit.String() + " (calendar, " + c.zone + ")"; !strings.Contains(s.Summary(), want) {
			t.Errorf("summary does not say %q:\n%s", want, s.Summary())
		}
	}
}
