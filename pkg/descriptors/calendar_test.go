package descriptors

import (
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// TestCalendarIDs: a calendar window's ID is its rule's ID followed by its
// unit and zone, so that turning calendar on, or changing its unit or zone,
// starts new counters; a rule without calendar keeps its ID.
func TestCalendarIDs(t *testing.T) {
	rule := func(extra string) string {
		s := loadText(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 5"+extra+"}\n  - key: n\n    rate_limit: {name: quota, unit: day, requests_per_unit: 5"+extra+"}\n")
		m, ok := s.Match("d", e("k=v"))
		if !ok {
			t.Fatal("no match")
		}
		n, ok := s.Match("d", e("n=v"))
		if !ok {
			t.Fatal("no match")
		}
		return m.Rule.Policy.ID() + " " + n.Rule.Policy.ID()
	}
	plain := rule("")
	if plain != "d/k d:quota" {
		t.Fatalf("IDs without calendar: %q", plain)
	}
	seen := map[string]string{plain: "plain"}
	for _, extra := range []string{
		", calendar: true",
		", calendar: true, time_zone: UTC",
		", calendar: true, time_zone: Europe/Berlin",
		", calendar: true, time_zone: Europe/Paris",
		", calendar: false",
	} {
		id := rule(extra)
		if prev, dup := seen[id]; dup && !(extra == ", calendar: false" && prev == "plain") &&
			!(extra == ", calendar: true, time_zone: UTC" && prev == ", calendar: true") {
			t.Errorf("%q: IDs %q, the same as with %q", extra, id, prev)
		}
		if extra == ", calendar: false" && id != plain {
			t.Errorf("calendar: false changed the IDs: %q", id)
		}
		seen[id] = extra
	}
	// Readable, and stable across releases (a change would reset counters).
	if got := rule(", calendar: true, time_zone: Europe/Berlin"); got != "d/k:calendar:month:europe_berlin--231b4fc46aba d:quota:calendar:day:europe_berlin--edc43690db93" {
		t.Errorf("calendar IDs: %q", got)
	}
}

// TestCalendarWithPenaltyAndSeveralLimits: a calendar window may carry a
// penalty box and be one limit of a rate_limits list; each limit keeps its
// own calendar, zone and penalty, and only the calendar one's ID names the
// calendar.
func TestCalendarWithPenaltyAndSeveralLimits(t *testing.T) {
	s := loadText(t, `domain: d
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - unit: month
        requests_per_unit: 1000
        calendar: true
        time_zone: Europe/Berlin
        penalty: {duration: 1h, max_duration: 24h, decay: 6h}
`)
	m, ok := s.Match("d", []Entry{{Key: "user", Value: "u1"}})
	if !ok || len(m.Rule.Limits) != 2 {
		t.Fatalf("match %v, %+v: want two limits", ok, m.Rule)
	}
	sec, month := m.Rule.Limits[0].Policy, m.Rule.Limits[1].Policy
	if sec.Calendar() != nil || sec.Penalty().On() || strings.Contains(sec.ID(), "calendar") {
		t.Errorf("per-second limit %s: calendar %v penalty %+v", sec.ID(), sec.Calendar(), sec.Penalty())
	}
	cal := month.Calendar()
	if cal == nil || cal.Unit != calendar.Month || cal.Location.String() != "Europe/Berlin" || month.Algorithm() != limiter.FixedWindow {
		t.Fatalf("monthly limit %s: calendar %+v", month.ID(), cal)
	}
	if want := (limiter.Penalty{Duration: time.Hour, MaxDuration: 24 * time.Hour, Decay: 6 * time.Hour}); month.Penalty() != want {
		t.Errorf("monthly limit: penalty %+v, want %+v", month.Penalty(), want)
	}
	if !strings.Contains(month.ID(), ":calendar:month:") {
		t.Errorf("monthly limit ID %q does not name the calendar", month.ID())
	}
}
