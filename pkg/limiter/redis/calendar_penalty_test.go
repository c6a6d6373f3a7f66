package redis

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

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
