package limiter_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func slidingLog(t testing.TB, limit int64, window time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.SlidingLog,
		Params: limiter.SlidingLogParams{Limit: limit, Window: window}})
}

// logOf packs (time, cost) pairs as State.Log.
func logOf(hits ...int64) string {
	var b []byte
	for i := 0; i < len(hits); i += 2 {
		b = limiter.AppendSlidingLogEntry(b, hits[i], hits[i+1])
	}
	return string(b)
}

func TestSlidingLog(t *testing.T) {
	const m = 60_000
	t.Run("five logins per fifteen minutes", func(t *testing.T) {
		p := slidingLog(t, 5, 15*time.Minute)
		w := int64(15 * m)
		st := run(t, p, limiter.State{}, []step{
			{now: t0, cost: 1, status: allowed, remaining: 4, reset: t0 + w},
			{now: t0 + m, cost: 1, status: allowed, remaining: 3, reset: t0 + m + w},
			{now: t0 + 2*m, cost: 2, status: allowed, remaining: 1, reset: t0 + 2*m + w},
			{now: t0 + 3*m, cost: 1, status: allowed, remaining: 0, reset: t0 + 3*m + w},
			// Full: the first hit leaves at t0 + w, exactly.
			{now: t0 + 4*m, cost: 1, status: denied, remaining: 0, retry: w - 4*m, reset: t0 + 3*m + w},
			// Cost 2 needs the first two hits gone: t0 + m + w.
			{now: t0 + 4*m, cost: 2, status: denied, remaining: 0, retry: w - 3*m, reset: t0 + 3*m + w},
			// Cost 3 needs the cost-2 hit gone too.
			{now: t0 + 4*m, cost: 3, status: denied, remaining: 0, retry: w - 2*m, reset: t0 + 3*m + w},
			{now: t0 + w - 1, cost: 1, status: denied, remaining: 0, retry: 1, reset: t0 + 3*m + w},
			// The hit at t0 is out of (now - w, now] at now = t0 + w.
			{now: t0 + w, cost: 1, status: allowed, remaining: 0, reset: t0 + 2*w},
		})
		// Pruned on the write: the hit at t0 is gone, the new one logged.
		if want := logOf(t0+m, 1, t0+2*m, 2, t0+3*m, 1, t0+w, 1); st.Log != want {
			t.Fatalf("log %x, want %x", st.Log, want)
		}
		// Windows of 15 min aligned to the epoch: one starts at
		// t0 + 100,000 ms, so the hit at t0 + m is in the window before
		// now's and the others in now's.
		if st.Epoch != (t0+w)/w || st.Level != 4 || st.Carry != 1 || st.ExpiresAtMs != t0+2*w+1000 {
			t.Fatalf("state %+v: want epoch %d, level 4, carry 1, expiry %d", st, (t0+w)/w, t0+2*w+1000)
		}
	})
	t.Run("one entry per millisecond", func(t *testing.T) {
		p := slidingLog(t, 10, time.Second)
		st := run(t, p, limiter.State{}, []step{
			{now: t0, cost: 2, status: allowed, remaining: 8, reset: t0 + 1000},
			{now: t0, cost: 3, status: allowed, remaining: 5, reset: t0 + 1000},
			{now: t0 + 5, cost: 5, status: allowed, remaining: 0, reset: t0 + 1005},
			{now: t0 + 6, cost: 6, status: denied, remaining: 0, retry: 999, reset: t0 + 1005},
		})
		if want := logOf(t0, 5, t0+5, 5); st.Log != want {
			t.Fatalf("log %x, want %x", st.Log, want)
		}
	})
	t.Run("clock", func(t *testing.T) {
		p := slidingLog(t, 2, time.Second)
		st := run(t, p, limiter.State{}, []step{{now: t0 + 500, cost: 1, status: allowed, remaining: 1, reset: t0 + 1500}})
		run(t, p, st, []step{
			// Clamped to t0 + 500: logged there, in the same entry.
			{now: t0 + 100, cost: 1, status: allowed, remaining: 0, reset: t0 + 1500, eff: t0 + 500},
			{now: t0 + 500 - 2001, cost: 1, status: unsafe},
		})
	})
	t.Run("lowered limit", func(t *testing.T) {
		p := slidingLog(t, 2, time.Second)
		st := limiter.State{Exists: true, Schema: limiter.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1,
			LastObservedMs: t0 + 30, Log: logOf(t0+10, 1, t0+20, 1, t0+30, 1)}
		// Three in the window, limit 2: two must leave for a cost of 1.
		run(t, p, st, []step{
			{now: t0 + 40, cost: 1, status: denied, remaining: 0, retry: 980, reset: t0 + 1030},
			{now: t0 + 1010, cost: 1, status: denied, remaining: 0, retry: 10, reset: t0 + 1030},
			{now: t0 + 1020, cost: 1, status: allowed, remaining: 0, reset: t0 + 2020},
		})
	})
	t.Run("estimated counts", func(t *testing.T) {
		// A state without a log (the overflow sketch's): Carry units at the
		// end of window Epoch-1, Level units at now or the end of window
		// Epoch: the latest they can have been taken.
		p := slidingLog(t, 5, time.Second)
		st := limiter.State{Exists: true, Schema: limiter.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1,
			LastObservedMs: t0 + 100, Epoch: t0/1000 + 1, Level: 2, Carry: 3}
		st = run(t, p, st, []step{
			// 3 at t0 + 999, 2 at t0 + 1100: full until t0 + 1999.
			{now: t0 + 1100, cost: 1, status: denied, remaining: 0, retry: 899, reset: t0 + 2100},
			{now: t0 + 1999, cost: 1, status: allowed, remaining: 2, reset: t0 + 2999},
		})
		// The 2 are placed at now again: one entry with the new hit.
		if st.Log != logOf(t0+1999, 3) || st.Level != 3 || st.Carry != 0 {
			t.Fatalf("state %+v", st)
		}
	})
	t.Run("estimated counts of the first window", func(t *testing.T) {
		// Window 0's previous window ends at -1: its units are placed at 0,
		// and the log written is one that can be read back.
		p := slidingLog(t, 5, time.Second)
		st := limiter.State{Exists: true, Schema: limiter.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1,
			LastObservedMs: 10, Epoch: 0, Carry: 2, Level: 1}
		st = run(t, p, st, []step{{now: 20, cost: 1, status: allowed, remaining: 1, reset: 1020}})
		if st.Log != logOf(0, 2, 20, 2) { // the 1 of window 0 at now, with the new hit
			t.Fatalf("log %x", st.Log)
		}
		run(t, p, st, []step{{now: 1000, cost: 2, status: allowed, remaining: 1, reset: 2000}})
	})
	t.Run("foreign logs are incompatible", func(t *testing.T) {
		p := slidingLog(t, 5, time.Second)
		base := limiter.State{Exists: true, Schema: limiter.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1, LastObservedMs: t0}
		for name, log := range map[string]string{
			"partial entry": logOf(t0, 1)[:9],
			"cost 0":        logOf(t0, 0),
			"out of order":  logOf(t0, 1, t0-1, 1),
			"after last":    logOf(t0+1, 1),
			"fraction":      "\x42\x78\xbc\xfe\x56\x80\x00\x01\x00\x01",
			"too long":      string(make([]byte, 10*(limiter.MaxSlidingLogLimit+1))),
		} {
			st := base
			st.Log = log
			if _, r, write := limiter.Apply(st, t0+1, p, 1); r.Status != limiter.StatusStateIncompatible || write {
				t.Errorf("%s: %s, write %v", name, r.Status, write)
			}
		}
		for name, st := range map[string]limiter.State{
			"counts above the maximum": {Level: limiter.MaxSlidingLogLimit + 1, Epoch: t0 / 1000},
			"a window beyond 2^53 ms":  {Level: 1, Epoch: limiter.MaxSafeInteger/1000 + 1},
			"negative counts":          {Carry: -1, Epoch: t0 / 1000},
		} {
			st.Exists, st.Schema, st.Algorithm, st.PolicyID, st.Revision, st.LastObservedMs = true, limiter.StateSchema, limiter.SlidingLog, p.ID(), 1, t0
			if _, r, write := limiter.Apply(st, t0+1, p, 1); r.Status != limiter.StatusStateIncompatible || write {
				t.Errorf("%s: %s, write %v", name, r.Status, write)
			}
		}
		// Checked after the clock rule (as the Lua step reads the log).
		bad := base
		bad.Log = logOf(t0, 0)
		if _, r, _ := limiter.Apply(bad, t0-5000, p, 1); r.Status != limiter.StatusClockUnsafe {
			t.Errorf("a foreign log behind an unsafe clock: %s, want CLOCK_UNSAFE", r.Status)
		}
		other := base
		other.Algorithm, other.Log = limiter.FixedWindow, logOf(t0, 1)
		fp := fixed(t, 5, time.Second)
		other.PolicyID = fp.ID()
		if _, r, _ := limiter.Apply(other, t0, fp, 1); r.Status != limiter.StatusStateIncompatible {
			t.Errorf("a fixed window with a log: %s", r.Status)
		}
	})
	t.Run("bounded limit", func(t *testing.T) {
		_, err := limiter.NewPolicy(limiter.PolicySpec{ID: "x", Algorithm: limiter.SlidingLog,
			Params: limiter.SlidingLogParams{Limit: limiter.MaxSlidingLogLimit + 1, Window: time.Second}})
		var fe *limiter.FieldError
		if !errors.As(err, &fe) || fe.Field != "limit" {
			t.Fatalf("limit %d: %v, want a limit field error", limiter.MaxSlidingLogLimit+1, err)
		}
		slidingLog(t, limiter.MaxSlidingLogLimit, time.Second)
	})
}

// TestSlidingLogIsExact: against a plain list of every admitted hit, the
// sliding log admits exactly when the hits of (now - window, now] leave
// room, and its remaining, retry and reset are the list's (random times,
// costs and limits; clock steps back within the allowed regression). A
// denial holds until its retry time (Policy.DenialsHold): no request of at
// least its cost is admitted before.
func TestSlidingLogIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 4))
	for run := 0; run < 300; run++ {
		limit := 1 + rng.Int64N(20)
		w := 1 + rng.Int64N(3000)
		p := slidingLog(t, limit, time.Duration(w)*time.Millisecond)
		var st limiter.State
		var hits [][2]int64  // every admitted hit: time, cost
		var holds [][2]int64 // every denial: until, cost
		now, last := t0, int64(0)
		for i := 0; i < 200; i++ {
			now += rng.Int64N(w/3+2) - rng.Int64N(w/10+2)
			cost := 1 + rng.Int64N(limit)
			next, r, write := limiter.Apply(st, now, p, cost)
			if r.Status == limiter.StatusClockUnsafe {
				continue
			}
			eff := max(now, last)
			var used int64
			for _, h := range hits {
				if h[0] > eff-w {
					used += h[1]
				}
			}
			want := used+cost <= limit
			for _, h := range holds {
				if write && eff < h[0] && cost >= h[1] {
					t.Fatalf("run %d step %d: cost %d admitted at %d, before a denial of cost %d held until %d", run, i, cost, eff, h[1], h[0])
				}
			}
			if write != want || r.EffectiveNowMs != eff {
				t.Fatalf("run %d step %d: now %d eff %d used %d cost %d limit %d: %+v", run, i, now, eff, used, cost, limit, r)
			}
			if want {
				hits = append(hits, [2]int64{eff, cost})
				last = eff
				st = next
				if r.Remaining != limit-used-cost || r.ResetAtMs != eff+w {
					t.Fatalf("run %d step %d: %+v, want remaining %d reset %d", run, i, r, limit-used-cost, eff+w)
				}
				continue
			}
			// The retry: the least d > 0 such that at eff + d the cost fits.
			var retry int64
			for d := int64(1); ; d++ {
				var u int64
				for _, h := range hits {
					if h[0] > eff+d-w {
						u += h[1]
					}
				}
				if u+cost <= limit {
					retry = d
					break
				}
			}
			holds = append(holds, [2]int64{eff + r.RetryAfterMs, cost})
			reset := hits[len(hits)-1][0] + w
			if r.RetryAfterMs != retry || r.Remaining != max(0, limit-used) || r.ResetAtMs != reset {
				t.Fatalf("run %d step %d: %+v, want retry %d remaining %d reset %d", run, i, r, retry, max(0, limit-used), reset)
			}
		}
	}
}
