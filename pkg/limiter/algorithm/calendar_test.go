package algorithm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("zone %s: %v", name, err)
	}
	return loc
}

func parse(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

// TestCalendarPolicy: a calendar fixed window's policy, its window ids and
// its step: the id is the period's start, reset and retry point at the
// period's end, the TTL ends at the period's end + grace.
func TestCalendarPolicy(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: "cal", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 2, Window: 30 * 24 * time.Hour, Calendar: &calendar.Calendar{Unit: calendar.Month, Location: berlin}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Calendar() == nil || p.Calendar().Unit != calendar.Month {
		t.Fatalf("calendar %+v", p.Calendar())
	}
	feb := parse(t, "2026-02-01T00:00:00+01:00")
	mar := parse(t, "2026-03-01T00:00:00+01:00")
	apr := parse(t, "2026-04-01T00:00:00+02:00")
	grace := p.CleanupGraceMillis()
	var st algorithm.State
	type step struct {
		at                 int64
		allowed            bool
		remaining, retry   int64
		resetAt, epoch, ex int64
	}
	for i, s := range []step{
		{at: feb + 5, allowed: true, remaining: 1, resetAt: mar, epoch: feb, ex: mar + grace},
		{at: mar - 1, allowed: true, remaining: 0, resetAt: mar, epoch: feb, ex: mar + grace},
		{at: mar - 1, allowed: false, remaining: 0, retry: 1, resetAt: mar, epoch: feb},
		{at: mar, allowed: true, remaining: 1, resetAt: apr, epoch: mar, ex: apr + grace},
	} {
		next, r, write := algorithm.Apply(st, s.at, p, 1)
		if (r.Status == algorithm.StatusAllowed) != s.allowed || r.Remaining != s.remaining || r.RetryAfterMs != s.retry || r.ResetAtMs != s.resetAt {
			t.Fatalf("step %d: %+v, want %+v", i, r, s)
		}
		if write {
			if next.Epoch != s.epoch || next.ExpiresAtMs != s.ex {
				t.Fatalf("step %d: state %+v, want epoch %d expiring at %d", i, next, s.epoch, s.ex)
			}
			st = next
		}
	}
	if id, end := algorithm.WindowAt(p, mar+10); id != mar || end != apr {
		t.Errorf("WindowAt: %d %d", id, end)
	}
	// A plain fixed window: the index and its end.
	q, _ := limiter.NewPolicy(limiter.PolicySpec{ID: "fw", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}})
	if id, end := algorithm.WindowAt(q, 2500); id != 2 || end != 3000 || q.Calendar() != nil {
		t.Errorf("WindowAt of a plain window: %d %d", id, end)
	}
	// The share keeps the calendar.
	sh, err := p.Share(2)
	if err != nil || sh.Calendar() == nil || sh.Limit() != 1 {
		t.Errorf("share: %v %v", sh, err)
	}
	// Rules.
	for _, c := range []struct {
		cal   *calendar.Calendar
		field string
	}{
		{&calendar.Calendar{Unit: 0, Location: berlin}, "calendar"},
		{&calendar.Calendar{Unit: calendar.Year + 1, Location: berlin}, "calendar"},
		{&calendar.Calendar{Unit: calendar.Day}, "time_zone"},
	} {
		_, err := limiter.NewPolicy(limiter.PolicySpec{ID: "cal", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Hour, Calendar: c.cal}})
		var fe *limiter.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("unit %d: %v, want a %s field error", c.cal.Unit, err, c.field)
		}
	}
}
