package descriptors

import (
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

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
	if cal == nil || cal.Unit != limiter.CalendarMonth || cal.Location.String() != "Europe/Berlin" || month.Algorithm() != limiter.FixedWindow {
		t.Fatalf("monthly limit %s: calendar %+v", month.ID(), cal)
	}
	if want := (limiter.Penalty{Duration: time.Hour, MaxDuration: 24 * time.Hour, Decay: 6 * time.Hour}); month.Penalty() != want {
		t.Errorf("monthly limit: penalty %+v, want %+v", month.Penalty(), want)
	}
	if !strings.Contains(month.ID(), ":calendar:month:") {
		t.Errorf("monthly limit ID %q does not name the calendar", month.ID())
	}
}
