package limitertest

import (
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // the calendar cases' zones, as the binary has them

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// NewStore builds a fresh store that decides by clock, for one timed case;
// the test cleans it up.
type NewStore func(t *testing.T, clock *Clock) limiter.Store

// RunTimed runs every case of TimedCases, each on a store newStore builds
// on a Clock set to the case's start.
func RunTimed(t *testing.T, newStore NewStore, cfg Config) {
	for _, tc := range TimedCases(t) {
		t.Run(tc.Name, func(t *testing.T) {
			cfg.Clock = NewClock(tc.Start)
			RunCase(t, newStore(t, cfg.Clock), cfg, tc)
		})
	}
}

// t0 is the start of the timed cases that need no particular date: a
// whole second, 800 s into an hour.
var t0 = time.UnixMilli(1_700_000_000_000).UTC()

// boxed is a limit of 2 a second with a penalty box of 10 s, doubling up
// to 40 s while the last block ended less than a minute ago.
func boxed(id string) limiter.PolicySpec {
	return limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params:  limiter.FixedWindowParams{Limit: 2, Window: time.Second},
		Penalty: limiter.Penalty{Duration: 10 * time.Second, MaxDuration: 40 * time.Second, Decay: time.Minute}}
}

// calendar is a fixed window of limit per calendar unit in zone.
func calendarSpec(id string, limit int64, unit calendar.Unit, zone *time.Location) limiter.PolicySpec {
	return limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: limit, Window: time.Hour, Calendar: &calendar.Calendar{Unit: unit, Location: zone}}}
}

// location loads a time zone of the tz database.
func location(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// retrying is w with the retry and reset points of a timed case.
func retrying(w Want, retry time.Duration, reset time.Time) Want {
	w.Retry, w.Reset = retry, reset
	return w
}

// resetting is w with the reset point of a timed case (no retry: allowed).
func resetting(w Want, reset time.Time) Want { return retrying(w, 0, reset) }

// CalendarMonth is the timed case of a calendar month of Berlin over 40
// subjects: the count resets exactly at local midnight on the 1st whatever
// the month's length (a leap February) and the offset (summer time in
// April), and a denial's retry and every reset point at that boundary. The
// memory store also runs it over its overflow sketch.
func CalendarMonth(t testing.TB) Case {
	berlin := location(t, "Europe/Berlin")
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	o := limiter.RoleOrdinary
	month := []Req{{0, "s", 1, o}}
	march, april, may := at("2028-03-01T00:00:00+01:00"), at("2028-04-01T00:00:00+02:00"), at("2028-05-01T00:00:00+02:00")
	return Case{
		Name:     "calendar month in Berlin",
		Start:    at("2028-02-01T00:00:00+01:00"),
		Subjects: 40,
		Policies: []limiter.PolicySpec{calendarSpec("month", 2, calendar.Month, berlin)},
		Steps: []Step{
			{Batch: month, Want: []Want{resetting(allowedConsumed(1), march)}},
			// The last millisecond of a leap February.
			{At: at("2028-02-29T23:59:59.999+01:00"), Batch: month, Want: []Want{resetting(allowedConsumed(0), march)}},
			{Batch: month, Want: []Want{retrying(denied(0), time.Millisecond, march)}},
			// Already March in Berlin.
			{At: at("2028-02-29T23:30:00Z"), Batch: month, Want: []Want{resetting(allowedConsumed(1), april)}},
			{At: at("2028-03-31T21:59:59.999Z"), Batch: month, Want: []Want{resetting(allowedConsumed(0), april)}},
			{Batch: month, Want: []Want{retrying(denied(0), time.Millisecond, april)}},
			// April 1st, 00:00 CEST.
			{At: at("2028-03-31T22:00:00Z"), Batch: month, Want: []Want{resetting(allowedConsumed(1), may)}},
		},
	}
}

// TimedCases is the table of behaviour over time.
func TimedCases(t testing.TB) []Case {
	return slices.Concat([]Case{CalendarMonth(t)}, penaltyTimedCases(), periodTimedCases(t))
}

// penaltyTimedCases: penalty blocks, their doubling and decay, in a batch
// and of a shadow limit.
func penaltyTimedCases() []Case {
	o, s, c := limiter.RoleOrdinary, limiter.RoleShadow, limiter.RoleCheck
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	one := []Req{{0, "u", 1, o}}
	shadowBoxed := boxed("shadow")
	shadowBoxed.Shadow = true
	return []Case{
		{
			// A block outlives the window's state, and ends to the
			// millisecond; an offence while the last block ended less than
			// the decay ago doubles; after the decay it starts over.
			Name:     "penalty box: block, doubling, decay",
			Start:    t0,
			Policies: []limiter.PolicySpec{boxed("pen")},
			Steps: []Step{
				{Batch: one, Want: []Want{resetting(allowedConsumed(1), at(time.Second))}},
				{Batch: one, Want: []Want{resetting(allowedConsumed(0), at(time.Second))}},
				{Batch: one, Want: []Want{retrying(denied(0), 10*time.Second, at(10*time.Second))}},
				// The window's state alone would have expired (1 s + 1 s
				// grace): the block is still there.
				{At: at(5 * time.Second), Batch: one, Want: []Want{retrying(blocked, 5*time.Second, at(10*time.Second))}},
				{At: at(10 * time.Second), Batch: one, Want: []Want{resetting(allowedConsumed(1), at(11*time.Second))}},
				{Batch: one, Want: []Want{resetting(allowedConsumed(0), at(11*time.Second))}},
				{Batch: one, Want: []Want{retrying(denied(0), 20*time.Second, at(30*time.Second))}},
				{At: at(30*time.Second - time.Millisecond), Batch: one, Want: []Want{retrying(blocked, time.Millisecond, at(30*time.Second))}},
				// 61 s after the block ended: forgotten.
				{At: at(91*time.Second - time.Millisecond), Batch: one, Want: []Want{resetting(allowedConsumed(1), at(91*time.Second))}},
				{Batch: one, Want: []Want{resetting(allowedConsumed(0), at(91*time.Second))}},
				{Batch: one, Want: []Want{retrying(denied(0), 10*time.Second, at(101*time.Second-time.Millisecond))}},
			},
		},
		{
			// A block shorter than the window's wait: the blocked answer
			// says to come back when the window admits again, not when the
			// block ends (the window would deny, a new offence).
			Name:  "penalty box: a blocked retry waits for the window",
			Start: t0,
			Policies: []limiter.PolicySpec{{ID: "hourly", Algorithm: limiter.FixedWindow,
				Params:  limiter.FixedWindowParams{Limit: 2, Window: time.Hour},
				Penalty: limiter.Penalty{Duration: 30 * time.Second, MaxDuration: time.Hour, Decay: time.Hour}}},
			Steps: []Step{
				{Batch: one, Want: []Want{resetting(allowedConsumed(1), at(2800*time.Second))}},
				{Batch: one, Want: []Want{resetting(allowedConsumed(0), at(2800*time.Second))}},
				{Batch: one, Want: []Want{retrying(denied(0), 2800*time.Second, at(2800*time.Second))}},
				{At: at(time.Second), Batch: one, Want: []Want{retrying(blocked, 2799*time.Second, at(2800*time.Second))}},
				{At: at(30*time.Second - time.Millisecond), Batch: one, Want: []Want{retrying(blocked, 2770*time.Second+time.Millisecond, at(2800*time.Second))}},
				// Back at the block's end: the window denies, a doubled block.
				{At: at(30 * time.Second), Batch: one, Want: []Want{retrying(denied(0), 2770*time.Second, at(2800*time.Second))}},
				{At: at(89 * time.Second), Batch: one, Want: []Want{retrying(blocked, 2711*time.Second, at(2800*time.Second))}},
				// The next hour: the window admits.
				{At: at(2800 * time.Second), Batch: one, Want: []Want{resetting(allowedConsumed(1), at(6400*time.Second))}},
			},
		},
		{
			// A check never records an offence; an offence is recorded
			// although its batch does not commit (the other limit consumes
			// nothing), and a later request of the batch sees its block.
			Name:     "penalty box in a batch",
			Start:    t0,
			Policies: []limiter.PolicySpec{boxed("pen"), fw("wide", 100)},
			Steps: []Step{
				{Batch: one, Want: []Want{resetting(allowedConsumed(1), at(time.Second))}},
				{Batch: one, Want: []Want{resetting(allowedConsumed(0), at(time.Second))}},
				{Batch: []Req{{0, "u", 1, c}}, Want: []Want{retrying(denied(0), time.Second, at(time.Second))}},
				{At: at(time.Second), Batch: []Req{{0, "u", 2, o}}, Want: []Want{resetting(allowedConsumed(0), at(2*time.Second))}},
				{Batch: []Req{{1, "u", 1, o}, {0, "u", 1, o}, {0, "u", 1, o}}, Want: []Want{
					allowedHeld(100),
					retrying(denied(0), 10*time.Second, at(11*time.Second)),
					retrying(blocked, 10*time.Second, at(11*time.Second)),
				}},
				{At: at(4 * time.Second), Batch: one, Want: []Want{retrying(blocked, 7*time.Second, at(11*time.Second))}},
				{Batch: []Req{{1, "u", 1, o}}, Want: []Want{allowedConsumed(99)}},
			},
		},
		{
			// A shadow limit records its offences and reports its blocks
			// (the service answers them OK); a blocked request consumes
			// nothing.
			Name:     "penalty box of a shadow limit",
			Start:    t0,
			Policies: []limiter.PolicySpec{shadowBoxed},
			Steps: []Step{
				{Batch: one, Want: []Want{resetting(allowedConsumed(1), at(time.Second))}},
				{Batch: one, Want: []Want{resetting(allowedConsumed(0), at(time.Second))}},
				{Batch: one, Want: []Want{retrying(denied(0), 10*time.Second, at(10*time.Second))}},
				{At: at(2 * time.Second), Batch: []Req{{0, "u", 1, s}}, Want: []Want{retrying(blocked, 8*time.Second, at(10*time.Second))}},
			},
		},
	}
}

// periodTimedCases: a calendar day across a clock change, and a sliding log.
func periodTimedCases(t testing.TB) []Case {
	o, pr := limiter.RoleOrdinary, limiter.RoleProbe
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	one := []Req{{0, "u", 1, o}}
	ny := location(t, "America/New_York")
	nyAt := func(day, hour, minute int) time.Time { return time.Date(2028, 3, day, hour, minute, 0, 0, ny) }
	return []Case{
		{
			// A calendar day of New York with a penalty box: an offence
			// just before local midnight blocks the subject into the next
			// day (its fresh count does not lift the block), a probe of
			// the blocked subject answers blocked and records nothing, and
			// the block's end admits the subject in a day of 23 hours (the
			// clocks spring forward).
			Name:  "calendar day with a penalty box",
			Start: nyAt(11, 23, 30),
			Policies: []limiter.PolicySpec{func() limiter.PolicySpec {
				spec := calendarSpec("day-pen", 2, calendar.Day, ny)
				spec.Penalty = limiter.Penalty{Duration: time.Hour, MaxDuration: 4 * time.Hour, Decay: time.Hour}
				return spec
			}()},
			Steps: []Step{
				{Batch: one, Want: []Want{resetting(allowedConsumed(1), nyAt(12, 0, 0))}},
				{Batch: one, Want: []Want{resetting(allowedConsumed(0), nyAt(12, 0, 0))}},
				{Batch: one, Want: []Want{retrying(denied(0), time.Hour, nyAt(12, 0, 30))}},
				// The reset of a blocked request is the later of the block's
				// end and the window's.
				{At: nyAt(12, 0, 10), Batch: []Req{{0, "u", 1, pr}}, Want: []Want{retrying(blocked, 20*time.Minute, nyAt(13, 0, 0))}},
				{Batch: one, Want: []Want{retrying(blocked, 20*time.Minute, nyAt(13, 0, 0))}},
				{At: nyAt(12, 0, 30), Batch: one, Want: []Want{resetting(allowedConsumed(1), nyAt(13, 0, 0))}},
			},
		},
		{
			// A sliding log keeps each hit until it leaves the window, alone
			// and in batches: once full, a request is admitted exactly when
			// the oldest hit has left (an estimate from window counts would
			// not); a denied batch consumes nothing on its other limit.
			Name:     "sliding log over time",
			Start:    t0,
			Policies: []limiter.PolicySpec{{ID: "log", Algorithm: limiter.SlidingLog, Params: limiter.SlidingLogParams{Limit: 3, Window: time.Minute}}, fw("other", 100)},
			Steps: []Step{
				{Batch: one, Want: []Want{resetting(allowedConsumed(2), at(time.Minute))}},
				{At: at(10 * time.Second), Batch: []Req{{0, "u", 1, o}, {1, "u", 1, o}}, Want: []Want{resetting(allowedConsumed(1), at(70*time.Second)), allowedConsumed(99)}},
				{At: at(20 * time.Second), Batch: one, Want: []Want{resetting(allowedConsumed(0), at(80*time.Second))}},
				{At: at(30 * time.Second), Batch: []Req{{0, "u", 1, o}, {1, "u", 1, o}}, Want: []Want{retrying(denied(0), 30*time.Second, at(80*time.Second)), allowedHeld(99)}},
				{At: at(time.Minute), Batch: one, Want: []Want{resetting(allowedConsumed(0), at(2*time.Minute))}},
				{At: at(61 * time.Second), Batch: []Req{{0, "u", 1, o}, {1, "u", 1, o}}, Want: []Want{retrying(denied(0), 9*time.Second, at(2*time.Minute)), allowedHeld(99)}},
				{At: at(70 * time.Second), Batch: one, Want: []Want{resetting(allowedConsumed(0), at(130*time.Second))}},
				{At: at(80 * time.Second), Batch: []Req{{0, "u", 1, o}, {1, "u", 1, o}}, Want: []Want{resetting(allowedConsumed(0), at(140*time.Second)), allowedConsumed(98)}},
			},
		},
	}
}
