package descriptors

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
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
		key     string
	}{
		{"edge", e("remote_address=203.0.113.7"), "edge/remote_address", "remote_address"},
		{"edge", e("path=/downloads/a.zip"), "edge/path=*.zip", "path"},
		{"api", e("route=/upload", "user=u1"), "api/route=/upload/user", "user"},
		{"algorithms", e("route=/bucket"), "algorithms/route=/bucket", "route"},
		{"penalty", e("login_user=alice"), "penalty/login_user", "login_user"},
		{"several", e("api_key=k"), "several/api_key", "api_key"},
		{"login", e("user=u1"), "login/user", "user"},
		{"login", e("remote_address=203.0.113.7", "action=password_reset"), "login/remote_address/action=password_reset", "action"},
		{"inflight", e("tenant=t"), "inflight/tenant", "tenant"},
		{"inflight", e("tenant=t", "model=m"), "inflight/tenant/model", "model"},
	}
	for _, c := range checks {
		m, ok := s.Match(c.domain, c.entries)
		if !ok || m.Rule.Path != c.path || m.Rule.Key != c.key {
			t.Errorf("Match(%s, %v) = %v %v, want %s (key %s)", c.domain, c.entries, ok, m.Rule, c.path, c.key)
		}
	}
	// 11-penalty.yaml: the login rule's box as written.
	if m, ok := s.Match("penalty", e("login_user=alice")); ok && m.Rule.Policy != nil {
		if pn := m.Rule.Policy.Penalty(); pn.Duration != 10*time.Minute || pn.MaxDuration != 24*time.Hour || pn.Decay != time.Hour {
			t.Errorf("penalty/login_user: penalty %+v", pn)
		}
	}
	// 08-several-limits.yaml: every limit of a list, with its ID.
	for _, c := range []struct {
		entries []Entry
		ids     []string
		algs    []limiter.Algorithm
	}{
		{e("api_key=k"), []string{"several/api_key", "several/api_key::1"}, []limiter.Algorithm{limiter.FixedWindow, limiter.FixedWindow}},
		{e("tenant=t"), []string{"several:tenant_burst", "several:tenant_hourly"}, []limiter.Algorithm{limiter.TokenBucket, limiter.SlidingWindow}},
	} {
		m, ok := s.Match("several", c.entries)
		if !ok || len(m.Rule.Limits) != len(c.ids) {
			t.Fatalf("several %v: %v %+v", c.entries, ok, m.Rule)
		}
		for i, r := range m.Rule.Limits {
			if r.Policy.ID() != c.ids[i] || r.Policy.Algorithm() != c.algs[i] {
				t.Errorf("several %v limit %d: %s %v, want %s %v", c.entries, i, r.Policy.ID(), r.Policy.Algorithm(), c.ids[i], c.algs[i])
			}
		}
	}
	// 12-concurrency.yaml: 20 streams of a tenant, leases of 10 minutes.
	if m, ok := s.Match("inflight", e("tenant=t")); !ok || !m.Rule.Policy.Leases() || m.Rule.Policy.Limit() != 20 ||
		m.Rule.Policy.LeaseTTLMillis() != (10*time.Minute).Milliseconds() {
		t.Errorf("inflight/tenant: %+v, want a concurrency limit of 20 with 10m leases", m.Rule)
	}
	// 13-token-budget-reserve.yaml: 20,000 an hour, reservations of 10
	// minutes, of the request's own hits_addend or of 500.
	for entry, want := range map[string]limiter.Reserve{"tenant=t": {TTL: 10 * time.Minute}, "api_key=k": {TTL: 10 * time.Minute, Estimate: 500}} {
		m, ok := s.Match("token_budget", e(entry))
		if !ok || m.Rule.Policy == nil || m.Rule.Policy.Limit() != 20000 || m.Rule.Policy.Reserve() != want {
			t.Errorf("token_budget %s: %+v, want 20000 an hour reserving %+v", entry, m.Rule, want)
		}
	}
	// The sliding log's example: 5 per 15 minutes, exact.
	m, ok := s.Match("login", e("user=u1"))
	if prm, isLog := m.Rule.Policy.Params().(limiter.SlidingLogParams); !ok || !isLog || prm.Limit != 5 || prm.Window != 15*time.Minute ||
		m.Rule.Policy.Certainty() != limiter.Certain {
		t.Errorf("login/user: %+v, want a sliding log of 5 per 15 minutes", m.Rule)
	}
}

// TestCalendarExample: config/examples/09-calendar.yaml builds calendar
// fixed windows in their zones, with IDs that name the calendar.
func TestCalendarExample(t *testing.T) {
	s := mustLoad(t, "../../config/examples/09-calendar.yaml")
	for _, c := range []struct {
		entry string
		unit  calendar.Unit
		zone  string
	}{
		{"api_key=k1", calendar.Month, "Europe/Berlin"},
		{"export_user=u1", calendar.Day, "America/New_York"},
		{"partner=p1", calendar.Week, "UTC"},
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
