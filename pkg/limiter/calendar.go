package limiter

import (
	"fmt"
	"sync/atomic"
	"time"
)

// CalendarUnit is the period of a calendar window.
type CalendarUnit uint8

const (
	CalendarMinute CalendarUnit = iota + 1 // a minute of the local clock
	CalendarHour                           // an hour of the local clock
	CalendarDay                            // a local day, midnight to midnight
	CalendarWeek                           // an ISO week, Monday 00:00 to Monday 00:00
	CalendarMonth                          // the 1st 00:00 to the next 1st 00:00
	CalendarYear                           // January 1st 00:00 to the next
)

func (u CalendarUnit) String() string {
	switch u {
	case CalendarMinute:
		return "minute"
	case CalendarHour:
		return "hour"
	case CalendarDay:
		return "day"
	case CalendarWeek:
		return "week"
	case CalendarMonth:
		return "month"
	case CalendarYear:
		return "year"
	}
	return "unknown"
}

// Calendar makes a fixed window a calendar period of a time zone: the
// window holding an instant is the minute, hour, day, ISO week, month or
// year of the local clock of Location that holds it (docs/algorithms.md,
// "Calendar windows"). Its window id is the period's start in Unix ms.
type Calendar struct {
	Unit CalendarUnit
	// Location is the time zone (time.LoadLocation). (Required)
	Location *time.Location

	// last holds the last three periods computed (Neighbours' boundaries):
	// periods are a pure function of the calendar, so any of them stays
	// true, and an instant in one of them needs no zone arithmetic.
	last atomic.Pointer[[4]int64]
}

// clone is a calendar of the same unit and zone, with no memory of periods.
func (c *Calendar) clone() *Calendar { return &Calendar{Unit: c.Unit, Location: c.Location} }

func (c *Calendar) check() error {
	if c.Unit < CalendarMinute || c.Unit > CalendarYear {
		return &FieldError{Field: "calendar", Reason: fmt.Sprintf("unit %d is not minute, hour, day, week, month or year", c.Unit)}
	}
	if c.Location == nil {
		return &FieldError{Field: "time_zone", Reason: "is required for a calendar window"}
	}
	return nil
}

// Period returns the calendar period holding the instant nowMs (Unix ms):
// [start, end), start <= nowMs < end. Sub-day units (minute, hour) are the
// whole minutes or hours of the local clock, cut where the zone's offset
// changes; the other units start at local midnight, or, when the local
// clock skips midnight, at the first instant after the skip.
func (c *Calendar) Period(nowMs int64) (start, end int64) {
	if b := c.last.Load(); b != nil && b[0] <= nowMs && nowMs < b[3] {
		i := 0
		for i < 2 && nowMs >= b[i+1] {
			i++
		}
		return b[i], b[i+1]
	}
	b := c.Neighbours(nowMs)
	return b[1], b[2]
}

// period is Period without the memory of the last periods.
func (c *Calendar) period(nowMs int64) (start, end int64) {
	t := time.UnixMilli(nowMs).In(c.Location)
	switch c.Unit {
	case CalendarMinute, CalendarHour:
		return c.subDay(t)
	}
	y, m, d := t.Date()
	var s, e time.Time
	switch c.Unit {
	case CalendarDay:
		s, e = c.midnight(y, m, d), c.midnight(y, m, d+1)
	case CalendarWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		s, e = c.midnight(y, m, d-back), c.midnight(y, m, d-back+7)
	case CalendarMonth:
		s, e = c.midnight(y, m, 1), c.midnight(y, m+1, 1)
	default:
		s, e = c.midnight(y, 1, 1), c.midnight(y+1, 1, 1)
	}
	start, end = s.UnixMilli(), e.UnixMilli()
	// A clock change that moves the local date backwards across midnight
	// (no zone in use does) would leave nowMs outside: a one-offset
	// fallback keeps start <= nowMs < end.
	if start > nowMs || end <= nowMs {
		start, end = c.subDay(t)
	}
	return start, end
}

// Neighbours returns the boundaries of the period before the one holding
// nowMs, of that period and of the one after it: b[0] < b[1] <= nowMs <
// b[2] < b[3], the three periods being [b[0], b[1]), [b[1], b[2]) and
// [b[2], b[3]).
func (c *Calendar) Neighbours(nowMs int64) [4]int64 {
	if l := c.last.Load(); l != nil && l[1] <= nowMs && nowMs < l[2] {
		return *l
	}
	b := new([4]int64) // allocated on a miss only
	b[1], b[2] = c.period(nowMs)
	b[0], _ = c.period(b[1] - 1)
	_, b[3] = c.period(b[2])
	c.last.Store(b)
	return *b
}

// midnight is the first instant of the local date (y, m, d) (normalised as
// time.Date does): 00:00, or the end of a clock change that skips it.
func (c *Calendar) midnight(y int, m time.Month, d int) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, c.Location)
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	ty, tm, td := t.Date()
	if time.Date(ty, tm, td, 0, 0, 0, 0, time.UTC).Before(want) {
		// 00:00 does not exist (the clock jumps over it) and Date gave an
		// instant of the day before: the day begins when the jump ends.
		_, jump := t.ZoneBounds()
		if !jump.IsZero() {
			return jump
		}
	}
	return t
}

// subDay is the minute or hour of the local clock holding t, within the
// span of t's zone offset: local wall time floored with the offset in
// force at t, and cut at the offset's changes.
func (c *Calendar) subDay(t time.Time) (start, end int64) {
	unit := int64(60_000)
	if c.Unit != CalendarMinute {
		unit = 3_600_000
	}
	if c.Unit > CalendarHour {
		// The fallback of a day-based unit: the day of the offset in force.
		unit = 86_400_000
	}
	_, off := t.Zone()
	wall := t.UnixMilli() + int64(off)*1000
	ws := wall - mod(wall, unit)
	start, end = ws-int64(off)*1000, ws-int64(off)*1000+unit
	zs, ze := t.ZoneBounds()
	if !zs.IsZero() && zs.UnixMilli() > start {
		start = zs.UnixMilli()
	}
	if !ze.IsZero() && ze.UnixMilli() < end {
		end = ze.UnixMilli()
	}
	return start, end
}

// mod is a mod b in [0, b) for b > 0.
func mod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}

// Calendar returns the calendar of a calendar fixed window, else nil.
func (p *Policy) Calendar() *Calendar { return p.calendar }

// WindowAt returns the id and the end (Unix ms) of the window holding
// nowMs, for the window algorithms: for an epoch-aligned window its index
// nowMs / WindowMillis and its end; for a calendar window its period's
// start and end (Calendar.Period).
func (p *Policy) WindowAt(nowMs int64) (id, end int64) {
	if p.calendar != nil {
		return p.calendar.Period(nowMs)
	}
	id = nowMs / p.windowMs
	return id, (id + 1) * p.windowMs
}
