package redis

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// calendarPolicy is a calendar fixed window of limit per unit in zone.
func calendarPolicy(t testing.TB, id string, limit int64, unit limiter.CalendarUnit, zone string) *limiter.Policy {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: limit, Window: time.Hour, Calendar: &limiter.Calendar{Unit: unit, Location: loc}}})
}

// calendarRandom is a calendar window of a random unit and zone, for the
// random differential tests.
func calendarRandom(t testing.TB, rng *rand.Rand, id string, limit int64) *limiter.Policy {
	t.Helper()
	units := []limiter.CalendarUnit{limiter.CalendarMinute, limiter.CalendarHour, limiter.CalendarDay, limiter.CalendarWeek, limiter.CalendarMonth, limiter.CalendarYear}
	zones := []string{"UTC", "Europe/Berlin", "Asia/Kolkata", "America/New_York", "Australia/Lord_Howe"}
	return calendarPolicy(t, id, limit, units[rng.IntN(len(units))], zones[rng.IntN(len(zones))])
}

// runAt runs one key of p with the calendar periods computed around nowMs
// (the Go side's estimate of Redis's clock) instead of the wall clock.
func (e *env) runAt(p *limiter.Policy, key string, cost, nowMs int64) limiter.Reply {
	e.t.Helper()
	_, r := e.runBatchKeys([]string{key}, lua.AppendBatchArgsAt(nil, p, cost, limiter.RoleOrdinary, nowMs), []*limiter.Policy{p})
	return r[0]
}

// TestCalendarRedisClockElsewhere: Go computes the periods around its own
// clock, Redis decides with TIME. A Redis clock one period ahead of Go's
// (or behind it) counts into the period that holds Redis's clock, exactly
// as limiter.Apply at Redis's time; two periods away is CLOCK_UNSAFE and
// writes nothing.
func TestCalendarRedisClockElsewhere(t *testing.T) {
	e := newEnv(t)
	for _, zone := range []string{"UTC", "Asia/Kolkata"} {
		p := calendarPolicy(t, "cal.clock", 3, limiter.CalendarMinute, zone)
		key := keyOf(p, subjectOf("calendar clock "+zone))
		for _, c := range []struct {
			name   string
			shift  int64 // Go's now minus Redis's, in ms
			unsafe bool
		}{
			{"Go in the same period", 0, false},
			{"Redis one period ahead", -60_000, false},
			{"Redis one period behind", 60_000, false},
			{"Redis two periods ahead", -120_000, true},
			{"Redis two periods behind", 120_000, true},
		} {
			e.do("DEL", key)
			var st limiter.State
			for i := range 4 {
				before := e.dump(key)
				goNow := e.serverNow() + c.shift
				got := e.runAt(p, key, 1, goNow)
				b := p.Calendar().Neighbours(goNow)
				if got.ServerNowMs < b[0] || got.ServerNowMs >= b[3] {
					// Redis's clock is outside the three periods sent.
					if got.Status != limiter.StatusClockUnsafe {
						t.Fatalf("%s %s step %d: Redis at %d outside [%d, %d): %+v, want CLOCK_UNSAFE", zone, c.name, i, got.ServerNowMs, b[0], b[3], got)
					}
					if after := e.dump(key); !reflect.DeepEqual(after, before) {
						t.Fatalf("%s %s step %d: CLOCK_UNSAFE wrote state", zone, c.name, i)
					}
					continue
				}
				if c.unsafe {
					t.Logf("%s %s step %d: a minute boundary passed during the call; checked as parity", zone, c.name, i)
				}
				next, want, write := limiter.Apply(st, got.ServerNowMs, p, 1)
				if got != want {
					t.Fatalf("%s %s step %d:\n lua %+v\n go  %+v", zone, c.name, i, got, want)
				}
				start, end := p.Calendar().Period(got.ServerNowMs)
				if got.ResetAtMs != end {
					t.Fatalf("%s %s step %d: reset at %d, the period of Redis's clock ends at %d", zone, c.name, i, got.ResetAtMs, end)
				}
				if write {
					st = next
					h := e.hash(key)
					if h["a"] != strconv.FormatInt(start, 10) || !reflect.DeepEqual(h, stateHash(next)) {
						t.Fatalf("%s %s step %d: hash %v, want window id %d (%v)", zone, c.name, i, h, start, stateHash(next))
					}
				}
			}
		}
	}
}

// TestCalendarParity: calendar windows of every unit against limiter.Apply,
// from random states in the periods around now, alone and among other
// keys, through the store too: its decision resets at the period's end.
func TestCalendarParity(t *testing.T) {
	e := newEnv(t)
	rng, n := seededRand(t, 11, 120, 40, "calendar iterations")
	for i := range n {
		p := calendarRandom(t, rng, "cal.par", 1+rng.Int64N(6))
		key := keyOf(p, subjectOf("calendar parity "+strconv.Itoa(i%5)))
		var st limiter.State
		if rng.IntN(4) > 0 {
			st = randomState(rng, p, e.serverNow())
		}
		k := 1 + rng.IntN(3)
		checkParityAmong(t, e, p, key, st, 1+rng.Int64N(p.MaxCost()), rng.IntN(k), k)
	}
	p := calendarPolicy(t, "cal.store", 2, limiter.CalendarMonth, "Europe/Berlin")
	sub := subjectOf("calendar store")
	e.do("DEL", keyOf(p, sub))
	for i, want := range []bool{true, true, false} {
		o := e.evaluate(p, sub, 1)
		if o.Kind != limiter.Evaluated || o.Decision.Allowed != want {
			t.Fatalf("store step %d: %+v", i, o)
		}
		_, end := p.Calendar().Period(time.Now().UnixMilli())
		if got := o.Decision.ResetAt.UnixMilli(); got != end {
			t.Fatalf("store step %d: reset at %d, the month ends at %d", i, got, end)
		}
		if !want && o.Decision.RetryAfter.Milliseconds() > end-time.Now().UnixMilli()+1000 {
			t.Fatalf("store step %d: retry after %v, the month ends in %dms", i, o.Decision.RetryAfter, end-time.Now().UnixMilli())
		}
	}
	if pt, left := e.pttl(keyOf(p, sub)), p.Calendar(); pt <= 0 || left == nil {
		t.Fatalf("PTTL %d", pt)
	} else if _, end := left.Period(time.Now().UnixMilli()); pt > end-time.Now().UnixMilli()+p.CleanupGraceMillis()+50 {
		t.Fatalf("PTTL %d beyond the month's end + grace", pt)
	}
}

// TestCalendarInvalidExtension: a calendar extension on another algorithm,
// missing, too long, or with boundaries out of order or range makes the
// key INVALID and writes nothing.
func TestCalendarInvalidExtension(t *testing.T) {
	e := newEnv(t)
	p := calendarPolicy(t, "cal.inv", 5, limiter.CalendarMinute, "UTC")
	key := keyOf(p, subjectOf("calendar invalid"))
	now := e.serverNow()
	good := lua.AppendBatchArgsAt(nil, p, 1, limiter.RoleOrdinary, now)
	if len(good[1]) != lua.BatchPacked+lua.CalendarPacked || good[1][1]&lua.FlagCalendar == 0 {
		t.Fatalf("packed %q", good[1])
	}
	b := p.Calendar().Neighbours(now)
	ext := func(v [4]float64) []string {
		f := batchFields{policy: p.ID(), alg: byte(limiter.FixedWindow), flags: lua.FlagCalendar, rev: 1, limit: 5,
			p2: float64(time.Hour.Milliseconds()), grace: float64(p.CleanupGraceMillis()), maxRegression: float64(p.MaxClockRegressionMillis()), cost: 1}
		a := f.args()
		for _, x := range v {
			a[1] += string(binaryFloat(x))
		}
		return a
	}
	fb := [4]float64{float64(b[0]), float64(b[1]), float64(b[2]), float64(b[3])}
	if got := ext(fb); !reflect.DeepEqual(got, good) {
		t.Fatalf("the test's encoding %q, the store's %q", got, good)
	}
	tb := bucket(t, "cal.inv", 5, 1, time.Second)
	tbArgs := lua.AppendBatchArgs(nil, tb, 1, limiter.RoleOrdinary)
	tbArgs[1] = string([]byte{tbArgs[1][0], tbArgs[1][1] | lua.FlagCalendar}) + tbArgs[1][2:] + good[1][lua.BatchPacked:]
	bad := map[string][]string{
		"missing":           {good[0], good[1][:lua.BatchPacked]},
		"short":             {good[0], good[1][:len(good[1])-1]},
		"long":              {good[0], good[1] + "x"},
		"out of order":      ext([4]float64{fb[0], fb[2], fb[1], fb[3]}),
		"empty period":      ext([4]float64{fb[0], fb[1], fb[1], fb[3]}),
		"negative":          ext([4]float64{-1, fb[1], fb[2], fb[3]}),
		"fractional":        ext([4]float64{fb[0], fb[1] + 0.5, fb[2], fb[3]}),
		"above 2^53":        ext([4]float64{fb[0], fb[1], fb[2], 1 << 54}),
		"on a token bucket": tbArgs,
	}
	for name, args := range bad {
		e.do("DEL", key)
		pol := p
		if name == "on a token bucket" {
			pol = tb
		}
		committed, r := e.runBatchKeys([]string{key}, args, []*limiter.Policy{pol})
		if committed || r[0].Status != limiter.StatusInvalid {
			t.Errorf("%s: committed %v, %+v, want INVALID", name, committed, r[0])
		}
		if e.do("EXISTS", key) != int64(0) {
			t.Errorf("%s: wrote state", name)
		}
	}
}

// TestCalendarRefund: the refund program gives a cost back to the period
// the batch took it in, and to no other.
func TestCalendarRefund(t *testing.T) {
	e := newEnv(t)
	p := calendarPolicy(t, "cal.refund", 5, limiter.CalendarHour, "Asia/Kolkata")
	sub := subjectOf("calendar refund")
	key := keyOf(p, sub)
	e.do("DEL", key)
	_, r := e.runBatch([]batchReq{{p: p, sub: sub, cost: 3}})
	if r[0].Status != limiter.StatusAllowed {
		t.Fatalf("%+v", r)
	}
	at := r[0].EffectiveNowMs
	start, end := p.Calendar().Period(at)
	// Another period (the next one, the previous one): nothing.
	if n := e.refund(p, key, 3, end); n != 0 || e.hash(key)["b"] != "3" {
		t.Fatalf("refund into the next period: %d, hash %v", n, e.hash(key))
	}
	if n := e.refund(p, key, 3, start-1); n != 0 || e.hash(key)["b"] != "3" {
		t.Fatalf("refund into the previous period: %d, hash %v", n, e.hash(key))
	}
	// The period the batch took it in: given back.
	if n := e.refund(p, key, 2, at); n != 1 || e.hash(key)["b"] != "1" || e.hash(key)["a"] != strconv.FormatInt(start, 10) {
		t.Fatalf("refund: %d, hash %v", n, e.hash(key))
	}
}

func binaryFloat(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }

// TestCalendarStoreUsesRedisClockEstimate: the store computes the periods
// it sends around its estimate of Redis's clock (clockOffset). An estimate
// an hour ahead, for a calendar minute, sends periods that do not hold
// Redis's TIME: CLOCK_UNSAFE, nothing written; with the estimate learnt
// again from TIME the same request is decided.
func TestCalendarStoreUsesRedisClockEstimate(t *testing.T) {
	e := newEnv(t)
	p := calendarPolicy(t, "cal.offset", 5, limiter.CalendarMinute, "UTC")
	sub := subjectOf("calendar offset")
	e.do("DEL", keyOf(p, sub))
	off := &e.store.offsets[0]
	cur, prev := off.cur.Load(), off.prev.Load()
	off.cur.Store(0)
	off.prev.Store(0)
	now := e.store.local.ms(time.Now())
	// Ahead, not behind: a deadline converted with an estimate behind
	// Redis's clock would already be past.
	off.sample(now, now+time.Hour.Milliseconds())
	o := e.evaluate(p, sub, 1)
	off.cur.Store(cur)
	off.prev.Store(prev)
	if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryClockUnsafe {
		t.Fatalf("periods around an estimate an hour ahead: %v/%s (%v), want unavailable/clock_unsafe", o.Kind, o.Category, o.Err)
	}
	if e.do("EXISTS", keyOf(p, sub)) != int64(0) {
		t.Fatal("CLOCK_UNSAFE wrote state")
	}
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated || !o.Decision.Allowed || o.Decision.Remaining != 4 {
		t.Fatalf("with the estimate restored: %+v", o)
	}
}

// TestCalendarWithPenalty: a calendar window with a penalty box carries
// both extensions (penalty first) and the program agrees with limiter.Apply
// on a block that outlasts its period (the next period's first request is
// BLOCKED until the block ends) and on an ended block in a new period
// (allowed, the period's count from zero). An offence within a period and
// its probes are the store suite's "calendar year with a penalty box".
func TestCalendarWithPenalty(t *testing.T) {
	e := newEnv(t)
	spec := calendarPolicy(t, "cal.pen", 2, limiter.CalendarMinute, "Asia/Kolkata").Spec()
	spec.Penalty = limiter.Penalty{Duration: 3 * time.Minute, MaxDuration: time.Hour, Decay: time.Hour}
	p := limitertest.Policy(t, spec)
	packed := lua.AppendBatchArgs(nil, p, 1, limiter.RoleOrdinary)[1]
	if len(packed) != lua.BatchPacked+lua.PenaltyPacked+lua.CalendarPacked || packed[1] != lua.FlagPenalty|lua.FlagCalendar {
		t.Fatalf("packed %d bytes, flags %d: want both extensions", len(packed), packed[1])
	}
	key := keyOf(p, subjectOf("calendar penalty"))
	for _, c := range []struct {
		name   string
		state  func(now, prev int64) limiter.State
		status limiter.Status
	}{
		{"a block from the previous period", func(now, prev int64) limiter.State {
			st := stateOf(p, now-1000, prev, 2, 0)
			st.PenaltyUntilMs, st.PenaltyLevel = now+2*60_000, 1
			return st
		}, limiter.StatusBlocked},
		{"an ended block, a new period", func(now, prev int64) limiter.State {
			st := stateOf(p, now-1000, prev, 2, 0)
			st.PenaltyUntilMs, st.PenaltyLevel = now-500, 1
			return st
		}, limiter.StatusAllowed},
	} {
		now := e.serverNow()
		start, _ := p.Calendar().Period(now)
		prev, _ := p.Calendar().Period(start - 1)
		got := checkParityAmong(t, e, p, key, c.state(now, prev), 1, 0, 1)
		if got.Status != c.status {
			t.Fatalf("%s: %+v, want %s", c.name, got, c.status)
		}
		if c.status == limiter.StatusBlocked && got.ResetAtMs < now+2*60_000-1000 {
			t.Fatalf("%s: reset at %d, before the block ends", c.name, got.ResetAtMs)
		}
	}
}

// TestOffenceOfARequestThatRaises: an offence is written only once every
// key of its request has been evaluated. A request whose first key is an
// offence (a denial of a hash that exists) and whose second key raises in
// the program fails alone and leaves the first key's hash as it was; the
// same offence without the failing key is written.
func TestOffenceOfARequestThatRaises(t *testing.T) {
	e := newEnv(t)
	spec := fixed(t, "pen.raise", 1, time.Hour).Spec()
	spec.Penalty = limiter.Penalty{Duration: time.Minute, MaxDuration: time.Hour, Decay: time.Hour}
	p := limitertest.Policy(t, spec)
	key, other := keyOf(p, subjectOf("pen.raise")), keyOf(p, subjectOf("pen.raise.other"))
	if got := e.run(p, key, 1); got.Status != limiter.StatusAllowed {
		t.Fatalf("first hit: %+v", got)
	}
	before := e.hash(key)
	pttl := e.pttl(key)

	args := lua.AppendBatchArgs(nil, p, 1, limiter.RoleOrdinary)
	short := lua.AppendBatchArgs(nil, p, 1, limiter.RoleOrdinary)
	short[1] = short[1][:20] // cut short: the program raises on this key
	grp, err := batchScript.Exec(t.Context(), e.store.client, []string{key, other},
		oneCall(append(append([]string{}, args...), short...), 2, 0)).ToArray()
	if err != nil || len(grp) != 1 {
		t.Fatalf("request: %v %v", grp, err)
	}
	vals, _ := grp[0].ToArray()
	policies := []*limiter.Policy{p, p}
	if _, err := lua.ParseBatchReply(policies, replyValues(nil, vals), make([]limiter.Reply, 2)); !errors.Is(err, lua.ErrRequestFailed) {
		t.Fatalf("the request: %v, want it failed", err)
	}
	if after := e.hash(key); !reflect.DeepEqual(after, before) {
		t.Fatalf("a request that raised wrote its offence: %v, was %v", after, before)
	}
	if got := e.pttl(key); got > pttl {
		t.Fatalf("a request that raised raised the expiry: %d ms, was %d ms", got, pttl)
	}

	// The same offence in a request that does not raise is written.
	msgs, err := e.execOne(t.Context(), []string{key}, args, 0)
	if err != nil {
		t.Fatal(err)
	}
	replies := make([]limiter.Reply, 1)
	if _, err := lua.ParseBatchReply(policies[:1], replyValues(nil, msgs), replies); err != nil || replies[0].Status != limiter.StatusDenied {
		t.Fatalf("offence: %+v, %v", replies[0], err)
	}
	pu, _ := e.do("HGET", key, "pu").(string)
	if pu != strconv.FormatInt(replies[0].EffectiveNowMs+time.Minute.Milliseconds(), 10) || e.do("HGET", key, "pn") != "1" {
		t.Fatalf("offence written as pu %q pn %v, want the block's end and level 1", pu, e.do("HGET", key, "pn"))
	}
	if got := e.pttl(key); got <= pttl {
		t.Fatalf("the offence did not raise the expiry to cover its decay: %d ms, was %d ms", got, pttl)
	}
}
