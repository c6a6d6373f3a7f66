// Package calendar holds the periods of calendar windows: the minute,
// hour, day, ISO week, month or year of a time zone's local clock that
// holds an instant (docs/algorithms.md, "Calendar windows").
package calendar

import (
	"sync/atomic"
	"time"
)

// Unit is the period of a calendar window.
type Unit uint8

const (
	Minute Unit = iota + 1 // a minute of the local clock
	Hour                   // an hour of the local clock
	Day                    // a local day, midnight to midnight
	Week                   // an ISO week, Monday 00:00 to Monday 00:00
	Month                  // the 1st 00:00 to the next 1st 00:00
	Year                   // January 1st 00:00 to the next
)

func (u Unit) String() string {
	switch u {
	case Minute:
		return "minute"
	case Hour:
		return "hour"
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return "unknown"
}

// Calendar is a unit of the local clock of Location: a calendar fixed
// window counts in its periods, its window id the period's start in Unix
// ms. Safe for concurrent use.
type Calendar struct {
	Unit Unit
	// Location is the time zone (time.LoadLocation). (Required)
	Location *time.Location

	// last holds the last three periods computed (Neighbours' boundaries):
	// periods are a pure function of the calendar, so any of them stays
	// true, and an instant in one of them needs no zone arithmetic.
	last atomic.Pointer[[4]int64]
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
	case Minute, Hour:
		return c.subDay(t)
	}
	y, m, d := t.Date()
	var s, e time.Time
	switch c.Unit {
	case Day:
		s, e = c.midnight(y, m, d), c.midnight(y, m, d+1)
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		s, e = c.midnight(y, m, d-back), c.midnight(y, m, d-back+7)
	case Month:
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
	if c.Unit != Minute {
		unit = 3_600_000
	}
	if c.Unit > Hour {
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
