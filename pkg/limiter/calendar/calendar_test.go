package calendar

import (
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("zone %s: %v", name, err)
	}
	return loc
}

// TestCalendarPeriods: the period holding an instant, as local wall times
// of the zone and as its length, across DST changes, leap years, month,
// year and ISO week rollovers, and for a zone against UTC.
func TestCalendarPeriods(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	utc := time.UTC
	kolkata := mustZone(t, "Asia/Kolkata")
	saoPaulo := mustZone(t, "America/Sao_Paulo")
	const h = time.Hour
	cases := []struct {
		name       string
		unit       Unit
		loc        *time.Location
		at         string // RFC 3339 instant
		start, end string // RFC 3339 instants
		length     time.Duration
	}{
		// Berlin: CET -> CEST on 2026-03-29 at 02:00, CEST -> CET on
		// 2026-10-25 at 03:00.
		{"spring day is 23h", Day, berlin, "2026-03-29T12:00:00+02:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23 * h},
		{"autumn day is 25h", Day, berlin, "2026-10-25T12:00:00+01:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * h},
		{"autumn day, first 02:xx", Day, berlin, "2026-10-25T02:30:00+02:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * h},
		{"autumn hour 02:xx CEST", Hour, berlin, "2026-10-25T02:30:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", h},
		{"autumn hour 02:xx CET", Hour, berlin, "2026-10-25T02:30:00+01:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00", h},
		{"spring hour after the jump", Hour, berlin, "2026-03-29T03:10:00+02:00", "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00", h},
		{"spring hour before the jump", Hour, berlin, "2026-03-29T01:59:59+01:00", "2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00", h},
		{"day at midnight exactly", Day, berlin, "2026-06-01T00:00:00+02:00", "2026-06-01T00:00:00+02:00", "2026-06-02T00:00:00+02:00", 24 * h},
		{"day a ms before midnight", Day, berlin, "2026-06-01T23:59:59.999+02:00", "2026-06-01T00:00:00+02:00", "2026-06-02T00:00:00+02:00", 24 * h},
		// Months.
		{"February of a common year", Month, berlin, "2026-02-28T23:59:59+01:00", "2026-02-01T00:00:00+01:00", "2026-03-01T00:00:00+01:00", 28 * 24 * h},
		{"February of a leap year", Month, berlin, "2028-02-29T12:00:00+01:00", "2028-02-01T00:00:00+01:00", "2028-03-01T00:00:00+01:00", 29 * 24 * h},
		{"March with the spring change", Month, berlin, "2026-03-15T00:00:00+01:00", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31*24*h - h},
		{"October with the autumn change", Month, berlin, "2026-10-31T23:00:00+01:00", "2026-10-01T00:00:00+02:00", "2026-11-01T00:00:00+01:00", 31*24*h + h},
		{"December to January", Month, berlin, "2026-12-31T23:59:59.999+01:00", "2026-12-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", 31 * 24 * h},
		{"January, first ms", Month, berlin, "2027-01-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", "2027-02-01T00:00:00+01:00", 31 * 24 * h},
		// Years.
		{"common year", Year, berlin, "2026-07-01T00:00:00+02:00", "2026-01-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", 365 * 24 * h},
		{"leap year", Year, utc, "2028-12-31T23:59:59Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z", 366 * 24 * h},
		// ISO weeks: 2026-12-31 is a Thursday; its week is 2026-W53,
		// Monday 2026-12-28 to Monday 2027-01-04.
		{"ISO week across the year", Week, berlin, "2027-01-03T23:00:00+01:00", "2026-12-28T00:00:00+01:00", "2027-01-04T00:00:00+01:00", 7 * 24 * h},
		{"ISO week on its Monday", Week, utc, "2026-12-28T00:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", 7 * 24 * h},
		{"ISO week with the spring change", Week, berlin, "2026-03-29T12:00:00+02:00", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 7*24*h - h},
		// The zone against UTC: 23:30 UTC on the 31st is already the 1st in Berlin.
		{"UTC month", Month, utc, "2026-03-31T23:30:00Z", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z", 31 * 24 * h},
		{"Berlin month, same instant", Month, berlin, "2026-03-31T23:30:00Z", "2026-04-01T00:00:00+02:00", "2026-05-01T00:00:00+02:00", 30 * 24 * h},
		{"UTC day", Day, utc, "2026-06-01T22:30:00Z", "2026-06-01T00:00:00Z", "2026-06-02T00:00:00Z", 24 * h},
		{"Berlin day, same instant", Day, berlin, "2026-06-01T22:30:00Z", "2026-06-02T00:00:00+02:00", "2026-06-03T00:00:00+02:00", 24 * h},
		// A half-hour offset: Kolkata's hours start at :30 UTC.
		{"Kolkata hour", Hour, kolkata, "2026-06-01T10:10:00Z", "2026-06-01T15:00:00+05:30", "2026-06-01T16:00:00+05:30", h},
		{"minute", Minute, berlin, "2026-06-01T10:10:59.999Z", "2026-06-01T10:10:00Z", "2026-06-01T10:11:00Z", time.Minute},
		// Sao Paulo skipped midnight on 2018-11-04 (00:00 -> 01:00): the
		// day began at 01:00 -02:00, and was 23 hours long.
		{"a day whose midnight is skipped", Day, saoPaulo, "2018-11-04T12:00:00-02:00", "2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00", 23 * h},
		{"the day before it", Day, saoPaulo, "2018-11-03T23:59:59-03:00", "2018-11-03T00:00:00-03:00", "2018-11-04T01:00:00-02:00", 24 * h},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at, start, end := parse(t, c.at), parse(t, c.start), parse(t, c.end)
			cal := &Calendar{Unit: c.unit, Location: c.loc}
			s, e := cal.Period(at)
			if s != start || e != end {
				t.Fatalf("Period(%s) = [%s, %s), want [%s, %s)", c.at, show(s, c.loc), show(e, c.loc), c.start, c.end)
			}
			if got := time.Duration(e-s) * time.Millisecond; got != c.length {
				t.Errorf("length %v, want %v", got, c.length)
			}
			// Every instant of the period maps to it; the neighbours are
			// the periods on either side.
			for _, x := range []int64{s, s + 1, (s + e) / 2, e - 1} {
				if s2, e2 := cal.Period(x); s2 != s || e2 != e {
					t.Errorf("Period(%s) = [%d, %d), want [%d, %d)", show(x, c.loc), s2, e2, s, e)
				}
			}
			b := cal.Neighbours(at)
			if b[1] != s || b[2] != e || !(b[0] < b[1]) || !(b[2] < b[3]) {
				t.Fatalf("Neighbours %v around [%d, %d)", b, s, e)
			}
			if ps, pe := cal.Period(b[0]); ps != b[0] || pe != b[1] {
				t.Errorf("previous period [%d, %d), Period(b0) = [%d, %d)", b[0], b[1], ps, pe)
			}
			if ns, ne := cal.Period(b[2]); ns != b[2] || ne != b[3] {
				t.Errorf("next period [%d, %d), Period(b2) = [%d, %d)", b[2], b[3], ns, ne)
			}
		})
	}
}

func parse(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

func show(ms int64, loc *time.Location) string {
	return time.UnixMilli(ms).In(loc).Format(time.RFC3339Nano)
}

// TestCalendarPeriodsTile: consecutive periods of every unit in zones with
// DST, a half-hour offset and skipped midnights tile the time line over
// two years: each starts where the previous ended, with a positive length
// within the unit's bounds.
func TestCalendarPeriodsTile(t *testing.T) {
	from := time.Date(2018, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	to := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	bounds := map[Unit][2]time.Duration{
		Minute: {time.Second, time.Minute},
		Hour:   {time.Minute, 2 * time.Hour},
		Day:    {22 * time.Hour, 26 * time.Hour},
		Week:   {7*24*time.Hour - 2*time.Hour, 7*24*time.Hour + 2*time.Hour},
		Month:  {28*24*time.Hour - 2*time.Hour, 31*24*time.Hour + 2*time.Hour},
		Year:   {365*24*time.Hour - 2*time.Hour, 366*24*time.Hour + 2*time.Hour},
	}
	for _, zone := range []string{"UTC", "Europe/Berlin", "America/Sao_Paulo", "Australia/Lord_Howe", "Asia/Kolkata"} {
		loc := mustZone(t, zone)
		for unit := Minute; unit <= Year; unit++ {
			cal := &Calendar{Unit: unit, Location: loc}
			n := 0
			// period, not Period: every period computed afresh.
			for s, e := cal.period(from); s < to && n < 2000; n++ {
				if l := time.Duration(e-s) * time.Millisecond; l < bounds[unit][0] || l > bounds[unit][1] {
					t.Fatalf("%s %s: period [%s, %s) of %v", zone, unit, show(s, loc), show(e, loc), l)
				}
				ns, ne := cal.period(e)
				if ps, pe := cal.Period(e); ps != ns || pe != ne {
					t.Fatalf("%s %s: Period(%d) = [%d, %d), period [%d, %d)", zone, unit, e, ps, pe, ns, ne)
				}
				if ns != e {
					t.Fatalf("%s %s: period after [%s, %s) starts at %s", zone, unit, show(s, loc), show(e, loc), show(ns, loc))
				}
				if unit < Day {
					// Jump to the next day: sub-day units are checked
					// around the start of each day.
					ns, ne = cal.period(e + 24*3_600_000)
				}
				s, e = ns, ne
			}
		}
	}
}

// BenchmarkCalendarPeriod: the cost a calendar window adds to a memory
// store evaluation (one Period) and to a Redis program's arguments (one
// Neighbours), in a period the calendar remembers, and the computation of
// one period when it does not (uncached; a miss of Neighbours is three).
func BenchmarkCalendarPeriod(b *testing.B) {
	berlin := mustZone(b, "Europe/Berlin")
	now := time.Date(2026, 3, 29, 12, 0, 0, 0, berlin).UnixMilli()
	for _, unit := range []Unit{Hour, Day, Month} {
		c := &Calendar{Unit: unit, Location: berlin}
		b.Run(unit.String()+"/period", func(b *testing.B) {
			for i := range b.N {
				c.Period(now + int64(i%1000))
			}
		})
		b.Run(unit.String()+"/uncached", func(b *testing.B) {
			for i := range b.N {
				c.period(now + int64(i%1000))
			}
		})
		b.Run(unit.String()+"/neighbours", func(b *testing.B) {
			for i := range b.N {
				c.Neighbours(now + int64(i%1000))
			}
		})
	}
}
