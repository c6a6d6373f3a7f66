package algorithm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

const blocked = algorithm.StatusBlocked

// penaltyStep is one step of a penalty table: a step, and for a denial
// whether it records an offence (level and block end).
type penaltyStep struct {
	step
	level, until int64
}

// runPenalty drives Check as a store that records offences does: an allowed
// request writes next, an offence writes its penalty fields (and nothing
// else), anything else writes nothing.
func runPenalty(t *testing.T, p *limiter.Policy, st algorithm.State, steps []penaltyStep) algorithm.State {
	t.Helper()
	for i, s := range steps {
		next, r, uncommitted, write := algorithm.Check(st, s.now, p, s.cost)
		want := algorithm.Reply{Status: s.status, ServerNowMs: s.now, EffectiveNowMs: s.now, Limit: p.Limit(),
			Remaining: s.remaining, RetryAfterMs: s.retry, ResetAtMs: s.reset}
		if s.status == blocked {
			want.BlockLeftMs = st.PenaltyUntilMs - s.now
		}
		if r != want {
			t.Fatalf("step %d: Check(now=%d, cost=%d)\n got %+v\nwant %+v", i, s.now, s.cost, r, want)
		}
		offence := algorithm.PenaltyRecorded(st, next)
		switch {
		case write:
			if s.status != allowed || offence {
				t.Fatalf("step %d: write with %s, offence %v", i, r.Status, offence)
			}
			if next.PenaltyUntilMs != st.PenaltyUntilMs || next.PenaltyLevel != st.PenaltyLevel {
				t.Fatalf("step %d: an allowed request changed the penalty: %+v", i, next)
			}
			if m := st.PenaltyUntilMs + p.Penalty().Decay.Milliseconds() + p.CleanupGraceMillis(); st.PenaltyLevel > 0 && next.ExpiresAtMs < m {
				t.Fatalf("step %d: expiry %d before the penalty is forgotten (%d)", i, next.ExpiresAtMs, m)
			}
		case offence:
			if s.level == 0 || next.PenaltyLevel != s.level || next.PenaltyUntilMs != s.until {
				t.Fatalf("step %d: offence level %d until %d, want level %d until %d", i, next.PenaltyLevel, next.PenaltyUntilMs, s.level, s.until)
			}
			if next.ExpiresAtMs != max(st.ExpiresAtMs, s.until+p.Penalty().Decay.Milliseconds()+p.CleanupGraceMillis()) {
				t.Fatalf("step %d: expiry %d does not cover the block and its decay", i, next.ExpiresAtMs)
			}
			rest := next
			rest.PenaltyUntilMs, rest.PenaltyLevel, rest.ExpiresAtMs = st.PenaltyUntilMs, st.PenaltyLevel, st.ExpiresAtMs
			if rest != st {
				t.Fatalf("step %d: an offence changed more than the penalty: %+v", i, next)
			}
			if uncommitted.Status != denied || uncommitted.RetryAfterMs > r.RetryAfterMs {
				t.Fatalf("step %d: uncommitted %+v is not the limit's own denial", i, uncommitted)
			}
		default:
			if s.level != 0 {
				t.Fatalf("step %d: no offence recorded, want level %d", i, s.level)
			}
			if next != st || uncommitted != r {
				t.Fatalf("step %d: %s changed the state or its uncommitted reply", i, r.Status)
			}
		}
		if write || offence {
			st = next
		}
	}
	return st
}

func penaltyPolicy(t testing.TB, params limiter.Params, alg limiter.Algorithm, pn limiter.Penalty) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: alg, Params: params, Penalty: pn})
}

func TestPenaltyBox(t *testing.T) {
	// 2 per second; a 10s block, doubling to at most 40s while the last
	// block ended less than 60s ago.
	pn := limiter.Penalty{Duration: 10 * time.Second, MaxDuration: 40 * time.Second, Decay: time.Minute}
	p := penaltyPolicy(t, limiter.FixedWindowParams{Limit: 2, Window: time.Second}, limiter.FixedWindow, pn)
	s := func(now, cost int64, status algorithm.Status, remaining, retry, reset int64) step {
		return step{now: now, cost: cost, status: status, remaining: remaining, retry: retry, reset: reset}
	}
	runPenalty(t, p, algorithm.State{}, []penaltyStep{
		{step: s(t0, 1, allowed, 1, 0, t0+1000)},
		{step: s(t0+1, 1, allowed, 0, 0, t0+1000)},
		// The offence: blocked for 10s from now, whatever the window.
		{step: s(t0+2, 1, denied, 0, 10000, t0+10002), level: 1, until: t0 + 10002},
		// Blocked: the window has room, the box has not; no new offence.
		{step: s(t0+5000, 1, blocked, 0, 5002, t0+10002)},
		{step: s(t0+10001, 2, blocked, 0, 1, t0+11000)}, // the window ends later
		// The block is over: the window decides again.
		{step: s(t0+10002, 1, allowed, 1, 0, t0+11000)},
		{step: s(t0+10003, 1, allowed, 0, 0, t0+11000)},
		// A second offence within the decay of the first block: 20s.
		{step: s(t0+10004, 1, denied, 0, 20000, t0+30004), level: 2, until: t0 + 30004},
		{step: s(t0+30003, 1, blocked, 0, 1, t0+31000)},
		{step: s(t0+30004, 1, allowed, 1, 0, t0+31000)},
		// Third: 40s, the cap.
		{step: s(t0+30005, 2, denied, 1, 40000, t0+70005), level: 3, until: t0 + 70005},
		{step: s(t0+70005, 2, allowed, 0, 0, t0+71000)},
		// Fourth: still 40s (capped), level 4.
		{step: s(t0+70006, 1, denied, 0, 40000, t0+110006), level: 4, until: t0 + 110006},
		// Quiet until 60s after the block ended: forgotten, 10s again.
		{step: s(t0+170006, 2, allowed, 0, 0, t0+171000)},
		{step: s(t0+170007, 1, denied, 0, 10000, t0+180007), level: 1, until: t0 + 180007},
	})
	t.Run("decay boundary", func(t *testing.T) {
		// Remembered strictly before the block's end plus the decay.
		st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: limiter.FixedWindow, PolicyID: p.ID(),
			Revision: p.Revision(), LastObservedMs: t0, Epoch: (t0 + 59999) / 1000, Level: 2, ExpiresAtMs: t0 + 70000,
			PenaltyUntilMs: t0, PenaltyLevel: 1}
		runPenalty(t, p, st, []penaltyStep{{step: s(t0+59999, 1, denied, 0, 20000, t0+79999), level: 2, until: t0 + 79999}})
		st2 := st
		st2.Epoch = (t0 + 60000) / 1000
		runPenalty(t, p, st2, []penaltyStep{{step: s(t0+60000, 1, denied, 0, 10000, t0+70000), level: 1, until: t0 + 70000}})
		// Decay 0: every offence gets the duration.
		p0 := penaltyPolicy(t, limiter.FixedWindowParams{Limit: 2, Window: time.Second}, limiter.FixedWindow,
			limiter.Penalty{Duration: 10 * time.Second, MaxDuration: 40 * time.Second})
		st.PolicyID = p0.ID()
		runPenalty(t, p0, st, []penaltyStep{{step: s(t0+59999, 1, denied, 0, 10000, t0+69999), level: 1, until: t0 + 69999}})
	})
	t.Run("a longer window wait", func(t *testing.T) {
		// A day's window outlasts a 1s block: the retry is the window's.
		pd := penaltyPolicy(t, limiter.FixedWindowParams{Limit: 1, Window: 24 * time.Hour}, limiter.FixedWindow,
			limiter.Penalty{Duration: time.Second})
		day := (t0/86400000 + 1) * 86400000
		runPenalty(t, pd, algorithm.State{}, []penaltyStep{
			{step: s(t0, 1, allowed, 0, 0, day)},
			{step: s(t0+1, 1, denied, 0, day-t0-1, day), level: 1, until: t0 + 1001},
			// Blocked for 1ms more, but the window admits nothing before
			// its end: the retry waits for it.
			{step: s(t0+1000, 1, blocked, 0, day-t0-1000, day)},
			{step: s(t0+1001, 1, denied, 0, day-t0-1001, day), level: 1, until: t0 + 2001},
		})
	})
	t.Run("a blocked retry waits for the limit", func(t *testing.T) {
		// 2 per hour, a 30s block: the block's end is no time to come
		// back while the window still denies (a new offence, a doubled
		// block); the window's end is.
		ph := penaltyPolicy(t, limiter.FixedWindowParams{Limit: 2, Window: time.Hour}, limiter.FixedWindow,
			limiter.Penalty{Duration: 30 * time.Second, MaxDuration: time.Hour, Decay: time.Hour})
		hour := (t0/3600000 + 1) * 3600000
		runPenalty(t, ph, algorithm.State{}, []penaltyStep{
			{step: s(t0, 1, allowed, 1, 0, hour)},
			{step: s(t0+1, 1, allowed, 0, 0, hour)},
			{step: s(t0+2, 1, denied, 0, hour-t0-2, hour), level: 1, until: t0 + 30002},
			{step: s(t0+3, 1, blocked, 0, hour-t0-3, hour)},
			{step: s(t0+30001, 1, blocked, 0, hour-t0-30001, hour)},
			// Whoever came back at the block's end: a new offence.
			{step: s(t0+30002, 1, denied, 0, hour-t0-30002, hour), level: 2, until: t0 + 90002},
		})
	})
	t.Run("token bucket", func(t *testing.T) {
		pt := penaltyPolicy(t, limiter.TokenBucketParams{Capacity: 2, RefillAmount: 1, RefillPeriod: time.Second},
			limiter.TokenBucket, limiter.Penalty{Duration: 5 * time.Second, MaxDuration: 20 * time.Second, Decay: 10 * time.Second})
		runPenalty(t, pt, algorithm.State{}, []penaltyStep{
			{step: s(t0, 2, allowed, 0, 0, t0+2000)},
			{step: s(t0+1, 1, denied, 0, 5000, t0+5001), level: 1, until: t0 + 5001},
			// Full again, but blocked: the reset is the block's end.
			{step: s(t0+3000, 1, blocked, 0, 2001, t0+5001)},
			{step: s(t0+5001, 2, allowed, 0, 0, t0+7001)},
			{step: s(t0+5002, 1, denied, 0, 10000, t0+15002), level: 2, until: t0 + 15002},
		})
	})
	t.Run("no state, no offence", func(t *testing.T) {
		// A fresh subject is never denied by a limit above 0 at its max
		// cost; a stale penalty of a policy without one is ignored.
		plain := fixed(t, 2, time.Second)
		st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: limiter.FixedWindow, PolicyID: plain.ID(),
			Revision: 1, LastObservedMs: t0, Epoch: t0 / 1000, Level: 2, ExpiresAtMs: t0 + 2000, PenaltyUntilMs: t0 + 5000, PenaltyLevel: 1}
		runPenalty(t, plain, st, []penaltyStep{{step: s(t0+1, 1, denied, 0, 999, t0/1000*1000+1000)}})
	})
}

func TestPenaltyValidation(t *testing.T) {
	fw := limiter.FixedWindowParams{Limit: 10, Window: time.Second}
	for _, tc := range []struct {
		name  string
		pn    limiter.Penalty
		limit int64
		field string
	}{
		{"max without duration", limiter.Penalty{MaxDuration: time.Second}, 10, "penalty.duration"},
		{"sub-millisecond", limiter.Penalty{Duration: time.Microsecond}, 10, "penalty.duration"},
		{"negative", limiter.Penalty{Duration: -time.Second}, 10, "penalty.duration"},
		{"too long", limiter.Penalty{Duration: 31 * 24 * time.Hour}, 10, "penalty.duration"},
		{"max below duration", limiter.Penalty{Duration: time.Minute, MaxDuration: time.Second}, 10, "penalty.max_duration"},
		{"max too long", limiter.Penalty{Duration: time.Minute, MaxDuration: 31 * 24 * time.Hour}, 10, "penalty.max_duration"},
		{"negative decay", limiter.Penalty{Duration: time.Minute, Decay: -time.Second}, 10, "penalty.decay"},
		{"decay too long", limiter.Penalty{Duration: time.Minute, Decay: 31 * 24 * time.Hour}, 10, "penalty.decay"},
		{"zero limit", limiter.Penalty{Duration: time.Minute}, 0, "penalty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prm := fw
			prm.Limit = tc.limit
			_, err := limiter.NewPolicy(limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow, Params: prm, Penalty: tc.pn})
			var fe *limiter.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("NewPolicy: %v, want a FieldError on %s", err, tc.field)
			}
		})
	}
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow, Params: fw, Penalty: limiter.Penalty{Duration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Penalty(); got.MaxDuration != time.Minute || got.Decay != 0 {
		t.Fatalf("defaults: %+v, want max_duration = duration, decay 0", got)
	}
}

func TestBlockedOutcome(t *testing.T) {
	pn := limiter.Penalty{Duration: time.Minute}
	p := penaltyPolicy(t, limiter.SlidingWindowParams{Limit: 2, Window: time.Second}, limiter.SlidingWindow, pn)
	r := algorithm.Reply{Status: blocked, ServerNowMs: t0, EffectiveNowMs: t0, Limit: 2, RetryAfterMs: 500, ResetAtMs: t0 + 500,
		BlockLeftMs: 400}
	o := algorithm.OutcomeFromReply(p, r, limiter.SourceRedis)
	if o.Kind != limiter.Evaluated || o.Decision.Allowed || !o.Decision.Blocked || o.Decision.Certainty != limiter.Certain ||
		o.Decision.RetryAfter != 500*time.Millisecond || o.Decision.BlockedFor != 400*time.Millisecond {
		t.Fatalf("BLOCKED outcome %+v: want a certain, blocked denial of 400ms of block", o)
	}
	for _, bad := range []algorithm.Reply{
		{Status: blocked, Limit: 2, Remaining: 1, RetryAfterMs: 500, BlockLeftMs: 400},
		{Status: blocked, Limit: 2},
		// The block's end missing, or past the retry.
		{Status: blocked, Limit: 2, RetryAfterMs: 500, ResetAtMs: t0 + 500},
		{Status: blocked, Limit: 2, RetryAfterMs: 500, ResetAtMs: t0 + 500, BlockLeftMs: 501},
	} {
		if o := algorithm.OutcomeFromReply(p, bad, limiter.SourceRedis); o.Kind != limiter.Incompatible {
			t.Errorf("%+v: %v, want Incompatible", bad, o.Kind)
		}
	}
	if o := algorithm.OutcomeFromReply(fixed(t, 2, time.Second), r, limiter.SourceRedis); o.Kind != limiter.Incompatible {
		t.Errorf("BLOCKED for a policy without a penalty: %v, want Incompatible", o.Kind)
	}
}
