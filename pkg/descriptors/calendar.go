package descriptors

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// maxZoneName bounds a time_zone value (the longest IANA name is 32 bytes).
const maxZoneName = 64

// calendarUnits maps the units a calendar window may have.
var calendarUnits = map[Unit]calendar.Unit{
	UnitMinute: calendar.Minute,
	UnitHour:   calendar.Hour,
	UnitDay:    calendar.Day,
	UnitWeek:   calendar.Week,
	UnitMonth:  calendar.Month,
	UnitYear:   calendar.Year,
}

// checkCalendar validates the calendar and time_zone keys of a rate_limit
// block whose unit and algorithm ls already holds, and sets ls.calendar.
// It reports whether they are valid; each problem goes to bad at the key
// it is about.
func (c *compiler) checkCalendar(rl *rawLimit, ls *limitSpec, bad func(p pos, format string, args ...any)) bool {
	if rl.unlimited {
		return true
	}
	if !rl.calendar {
		if rl.timeZonePos.set() {
			bad(rl.timeZonePos, "time_zone needs calendar: true (it is the zone of a calendar window; other windows are aligned on the Unix epoch)")
			return false
		}
		return true
	}
	ok := true
	if ls.algorithm != limiter.FixedWindow {
		bad(rl.calendarPos, "calendar: true is only valid with algorithm: fixed_window (got %s)", ls.algorithm)
		ok = false
	}
	unit, known := calendarUnits[ls.unit]
	if ls.unit != 0 && !known {
		bad(rl.calendarPos, "calendar: true needs unit minute, hour, day, week, month or year (got %s)", ls.unit)
		ok = false
	}
	if ls.mult != 1 {
		bad(rl.unitMultiplierPos, "calendar: true takes one calendar unit per window: unit_multiplier must be 1 (got %d)", ls.mult)
		ok = false
	}
	name := "UTC"
	if rl.timeZonePos.set() {
		name = rl.timeZone
	}
	loc, err := loadZone(name)
	if err != nil {
		bad(rl.timeZonePos, "time_zone %q is not a known IANA time zone name (such as UTC or Europe/Berlin)", truncate(name, 40))
		ok = false
	}
	if ok {
		ls.calendar = &calendar.Calendar{Unit: unit, Location: loc}
		ls.zone = name
	}
	return ok
}

// loadZone loads an IANA zone by name. "Local" (this machine's zone, which
// differs between replicas) and "" are refused.
func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" || len(name) > maxZoneName {
		return nil, &limiter.FieldError{Field: "time_zone", Reason: "must be an IANA zone name"}
	}
	return time.LoadLocation(name)
}
