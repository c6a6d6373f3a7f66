package algorithm_test

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// t0 is an arbitrary epoch-aligned start (a multiple of every window used).
const t0 int64 = 1_700_000_000_000

// step is one evaluation of a step table: the request (store time and cost)
// and the reply fields it must produce. eff is the expected effective time
// when it differs from now (a clamped clock).
type step struct {
	now, cost int64
	status    algorithm.Status
	remaining int64
	retry     int64
	reset     int64
	eff       int64
}

// run drives Apply through steps, keeping the state between them like a
// store would, and checks every reply field and the write rules.
func run(t *testing.T, p *limiter.Policy, st algorithm.State, steps []step) algorithm.State {
	t.Helper()
	for i, s := range steps {
		next, r, write := algorithm.Apply(st, s.now, p, s.cost)
		eff := s.now
		if s.eff != 0 {
			eff = s.eff
		}
		want := algorithm.Reply{Status: s.status, ServerNowMs: s.now, EffectiveNowMs: eff, Limit: p.Limit(),
			Remaining: s.remaining, RetryAfterMs: s.retry, ResetAtMs: s.reset}
		if s.status == algorithm.StatusClockUnsafe || s.status == algorithm.StatusStateIncompatible {
			want = algorithm.Reply{Status: s.status, ServerNowMs: s.now, EffectiveNowMs: s.now, Limit: p.Limit()}
		}
		if r != want {
			t.Fatalf("step %d: Apply(now=%d, cost=%d)\n got %+v\nwant %+v", i, s.now, s.cost, r, want)
		}
		if write != (s.status == algorithm.StatusAllowed) {
			t.Fatalf("step %d: write = %v for %s", i, write, r.Status)
		}
		if !write {
			if next != st {
				t.Fatalf("step %d: %s changed the state\n got %+v\nwant %+v", i, r.Status, next, st)
			}
			continue
		}
		if next.LastObservedMs != eff || next.ExpiresAtMs <= eff {
			t.Fatalf("step %d: next state %+v: last observed or expiry wrong for effective now %d", i, next, eff)
		}
		st = next
	}
	return st
}

func fixed(t testing.TB, limit int64, window time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: limit, Window: window}})
}

func sliding(t testing.TB, limit int64, window time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: limit, Window: window}})
}

func bucket(t testing.TB, capacity, amount int64, period time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.TokenBucket,
		Params: limiter.TokenBucketParams{Capacity: capacity, RefillAmount: amount, RefillPeriod: period}})
}

const (
	allowed = algorithm.StatusAllowed
	denied  = algorithm.StatusDenied
	unsafe  = algorithm.StatusClockUnsafe
	incompa = algorithm.StatusStateIncompatible
)

func TestFixedWindow(t *testing.T) {
	p := fixed(t, 10, time.Second)
	end := t0 + 1000
	t.Run("boundary after denial", func(t *testing.T) {
		run(t, p, algorithm.State{}, []step{
			{now: t0, cost: 7, status: allowed, remaining: 3, reset: end},
			{now: t0 + 1, cost: 4, status: denied, remaining: 3, retry: 999, reset: end}, // cost > remaining
			{now: t0 + 2, cost: 3, status: allowed, remaining: 0, reset: end},            // the denial consumed nothing
			{now: t0 + 3, cost: 1, status: denied, remaining: 0, retry: 997, reset: end},
			{now: t0 + 999, cost: 1, status: denied, remaining: 0, retry: 1, reset: end},
		})
	})
	t.Run("window roll", func(t *testing.T) {
		run(t, p, algorithm.State{}, []step{
			{now: t0 + 500, cost: 10, status: allowed, remaining: 0, reset: end},
			{now: t0 + 999, cost: 1, status: denied, remaining: 0, retry: 1, reset: end},
			{now: t0 + 1000, cost: 10, status: allowed, remaining: 0, reset: t0 + 2000},
			{now: t0 + 1999, cost: 1, status: denied, remaining: 0, retry: 1, reset: t0 + 2000},
			{now: t0 + 7250, cost: 1, status: allowed, remaining: 9, reset: t0 + 8000}, // several windows later
		})
	})
	t.Run("clock", func(t *testing.T) {
		// Default max clock regression: 2s.
		run(t, p, algorithm.State{}, []step{
			{now: t0 + 900, cost: 1, status: allowed, remaining: 9, reset: end},
			{now: t0 + 100, cost: 1, status: allowed, remaining: 8, reset: end, eff: t0 + 900},        // small step back: clamped
			{now: t0 + 900 - 2000, cost: 1, status: allowed, remaining: 7, reset: end, eff: t0 + 900}, // exactly the threshold
			{now: t0 + 900 - 2001, cost: 1, status: unsafe},                                           // beyond: refused
			{now: t0 + 950, cost: 1, status: allowed, remaining: 6, reset: end},
			{now: 0, cost: 1, status: unsafe},
		})
	})
	t.Run("ttl", func(t *testing.T) {
		st := run(t, p, algorithm.State{}, []step{{now: t0 + 300, cost: 1, status: allowed, remaining: 9, reset: end}})
		if want := end + 1000; st.ExpiresAtMs != want { // window end + default cleanup grace 1s
			t.Fatalf("ExpiresAtMs = %d, want %d", st.ExpiresAtMs, want)
		}
		if st.Epoch != t0/1000 || st.Level != 1 {
			t.Fatalf("state %+v: want window id %d, consumed 1", st, t0/1000)
		}
	})
	t.Run("limit near 2^53", func(t *testing.T) {
		max := limiter.MaxSafeInteger
		p := fixed(t, max, time.Hour)
		wend := (t0/3_600_000 + 1) * 3_600_000
		run(t, p, algorithm.State{}, []step{
			{now: t0, cost: max - 1, status: allowed, remaining: 1, reset: wend},
			{now: t0, cost: 2, status: denied, remaining: 1, retry: wend - t0, reset: wend},
			{now: t0, cost: 1, status: allowed, remaining: 0, reset: wend},
			{now: t0, cost: max, status: denied, remaining: 0, retry: wend - t0, reset: wend},
			{now: wend, cost: max, status: allowed, remaining: 0, reset: wend + 3_600_000},
		})
	})
	t.Run("lowered limit, same revision", func(t *testing.T) {
		big := fixed(t, 100, time.Second)
		st := run(t, big, algorithm.State{}, []step{{now: t0, cost: 50, status: allowed, remaining: 50, reset: end}})
		run(t, p, st, []step{{now: t0 + 1, cost: 1, status: denied, remaining: 0, retry: 999, reset: end}})
	})
}

func TestSlidingWindow(t *testing.T) {
	p := sliding(t, 10, time.Second)
	t.Run("boundary, roll and retry", func(t *testing.T) {
		run(t, p, algorithm.State{}, []step{
			{now: t0, cost: 10, status: allowed, remaining: 0, reset: t0 + 2000},
			{now: t0 + 999, cost: 1, status: denied, remaining: 0, retry: 1 + 100, reset: t0 + 2000},
			// 0% into the next window: the previous count weighs fully.
			{now: t0 + 1000, cost: 1, status: denied, remaining: 0, retry: 100, reset: t0 + 2000},
			// 10%: weight 0.9, estimate 9.
			{now: t0 + 1100, cost: 1, status: allowed, remaining: 0, reset: t0 + 3000},
			// 50%: estimate 5 + 1.
			{now: t0 + 1500, cost: 5, status: denied, remaining: 4, retry: 100, reset: t0 + 3000},
			{now: t0 + 1500, cost: 4, status: allowed, remaining: 0, reset: t0 + 3000}, // exactly what the denial left
			// 99.9%: ceil(10 * 0.001) = 1, estimate 1 + 5: 4 left, 5 wanted.
			{now: t0 + 1999, cost: 5, status: denied, remaining: 4, retry: 1, reset: t0 + 3000},
			// Roll: previous = 5, weight 1.
			{now: t0 + 2000, cost: 5, status: allowed, remaining: 0, reset: t0 + 4000},
			// Two windows later everything is forgotten.
			{now: t0 + 4000, cost: 10, status: allowed, remaining: 0, reset: t0 + 6000},
		})
	})
	t.Run("cost needs the next window", func(t *testing.T) {
		run(t, p, algorithm.State{}, []step{
			{now: t0 + 200, cost: 8, status: allowed, remaining: 2, reset: t0 + 2000},
			// cur 8 + 3 > 10: wait for the roll (800ms), then until
			// ceil(8*w) + 3 <= 10, w <= 0.875: e' = 125.
			{now: t0 + 200, cost: 3, status: denied, remaining: 2, retry: 800 + 125, reset: t0 + 2000},
			{now: t0 + 1124, cost: 3, status: denied, remaining: 2, retry: 1, reset: t0 + 2000},
			{now: t0 + 1125, cost: 3, status: allowed, remaining: 0, reset: t0 + 3000},
		})
	})
	t.Run("weight", func(t *testing.T) {
		// previous window: 600 of 1000; one unit spent now shows the estimate.
		p := sliding(t, 1000, time.Second)
		prev := run(t, p, algorithm.State{}, []step{{now: t0, cost: 600, status: allowed, remaining: 400, reset: t0 + 2000}})
		for _, tc := range []struct {
			name     string
			e        int64
			estimate int64 // of the previous window's part
		}{
			{"0%", 0, 600},
			{"33.3% rounds up", 333, 401}, // weight ceil(0.667e6), 600*0.667 = 400.2 -> 401
			{"50%", 500, 300},
			{"99%", 990, 6},
			{"99.9% never rounds to zero", 999, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				run(t, p, prev, []step{{now: t0 + 1000 + tc.e, cost: 1, status: allowed, remaining: 1000 - tc.estimate - 1, reset: t0 + 3000}})
			})
		}
	})
	t.Run("clock", func(t *testing.T) {
		st := run(t, p, algorithm.State{}, []step{
			{now: t0 + 1500, cost: 2, status: allowed, remaining: 8, reset: t0 + 3000},
			{now: t0 + 1400, cost: 2, status: allowed, remaining: 6, reset: t0 + 3000, eff: t0 + 1500},
		})
		run(t, p, st, []step{{now: t0 + 1500 - 2001, cost: 1, status: unsafe}})
	})
	t.Run("limits near 2^53", func(t *testing.T) {
		limit := limiter.MaxSafeInteger / limiter.SlidingScale // 9007199254
		window := limit                                        // ms
		p := sliding(t, limit, time.Duration(window)*time.Millisecond)
		start := (t0/window + 1) * window
		st := run(t, p, algorithm.State{}, []step{{now: start, cost: limit, status: allowed, remaining: 0, reset: start + 2*window}})
		for _, e := range []int64{0, 1, window / 3, window / 2, window - 1} {
			// Exact reference with big integers: ceil(limit * ceil((window-e)*S / window) / S).
			w := ceilBig(big.NewInt(0).Mul(big.NewInt(window-e), big.NewInt(limiter.SlidingScale)), big.NewInt(window))
			part := ceilBig(w.Mul(w, big.NewInt(limit)), big.NewInt(limiter.SlidingScale)).Int64()
			_, r, _ := algorithm.Apply(st, start+window+e, p, 1)
			if want := max(0, limit-part-1); r.Remaining != want && !(r.Status == denied && r.Remaining == limit-part) {
				t.Fatalf("e=%d: reply %+v, want estimate %d", e, r, part)
			}
		}
	})
}

func ceilBig(a, b *big.Int) *big.Int {
	q, m := big.NewInt(0).QuoRem(a, b, big.NewInt(0))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

func TestTokenBucket(t *testing.T) {
	p := bucket(t, 10, 1, 100*time.Millisecond) // 10 tokens, one every 100ms
	t.Run("boundary after denial", func(t *testing.T) {
		run(t, p, algorithm.State{}, []step{
			{now: t0, cost: 10, status: allowed, remaining: 0, reset: t0 + 1000},
			{now: t0 + 50, cost: 1, status: denied, remaining: 0, retry: 50, reset: t0 + 1000},
			{now: t0 + 100, cost: 1, status: allowed, remaining: 0, reset: t0 + 1100},
			// 250ms later: 2 tokens and half of one; 3 wanted.
			{now: t0 + 350, cost: 3, status: denied, remaining: 2, retry: 50, reset: t0 + 1100},
			{now: t0 + 400, cost: 3, status: allowed, remaining: 0, reset: t0 + 1400},
			{now: t0 + 400, cost: 10, status: denied, remaining: 0, retry: 1000, reset: t0 + 1400},
		})
	})
	t.Run("saturation", func(t *testing.T) {
		st := run(t, p, algorithm.State{}, []step{
			{now: t0, cost: 1, status: allowed, remaining: 9, reset: t0 + 100},
			{now: t0 + 10_000_000, cost: 1, status: allowed, remaining: 9, reset: t0 + 10_000_100},
		})
		if st.Level != 9 || st.Carry != 0 {
			t.Fatalf("state %+v: want 9 tokens, no remainder", st)
		}
		if want := t0 + 10_000_100 + 1000; st.ExpiresAtMs != want {
			t.Fatalf("ExpiresAtMs = %d, want %d (time to full + grace)", st.ExpiresAtMs, want)
		}
	})
	t.Run("clock", func(t *testing.T) {
		st := run(t, p, algorithm.State{}, []step{
			{now: t0 + 1000, cost: 5, status: allowed, remaining: 5, reset: t0 + 1500},
			{now: t0 + 500, cost: 5, status: allowed, remaining: 0, reset: t0 + 2000, eff: t0 + 1000},
		})
		run(t, p, st, []step{
			{now: t0 + 1000 - 2001, cost: 1, status: unsafe},
			{now: t0 + 1000 - 2000, cost: 1, status: denied, remaining: 0, retry: 100, reset: t0 + 2000, eff: t0 + 1000},
		})
	})
	t.Run("capacity*period at the bound", func(t *testing.T) {
		// 1e6 tokens per ms: capacity*period may reach 2^53-1 - amount.
		capacity := limiter.MaxSafeInteger - 1_000_000
		p := bucket(t, capacity, 1_000_000, time.Millisecond)
		full := ceilDivTest(capacity, 1_000_000)
		run(t, p, algorithm.State{}, []step{
			{now: t0, cost: capacity, status: allowed, remaining: 0, reset: t0 + full},
			{now: t0 + 1, cost: 2_000_000, status: denied, remaining: 1_000_000, retry: 1, reset: t0 + full},
			{now: t0 + 2, cost: capacity, status: denied, remaining: 2_000_000, retry: full - 2, reset: t0 + full},
			{now: t0 + full - 1, cost: capacity, status: denied, remaining: (full - 1) * 1_000_000, retry: 1, reset: t0 + full},
			{now: t0 + full, cost: capacity, status: allowed, remaining: 0, reset: t0 + 2*full},
			{now: t0 + 1_000_000*full, cost: 1, status: allowed, remaining: capacity - 1, reset: t0 + 1_000_000*full + 1},
		})
	})
}

func ceilDivTest(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// TestTokenBucketRemainderCarry: a thousand refills of 1ms leave exactly the
// state one refill of 1s leaves.
func TestTokenBucketRemainderCarry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		amount int64
		period time.Duration
	}{
		{"1 per second", 1, time.Second},
		{"3 per 7ms", 3, 7 * time.Millisecond},
		{"1000 per 999ms", 1000, 999 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := bucket(t, 1_000_000, tc.amount, tc.period)
			// Leave 1000 tokens, so that every step below is allowed (and
			// written) and both paths end with the same consumption.
			start, _, _ := algorithm.Apply(algorithm.State{}, t0, p, 999_000)
			many := start
			for i := int64(1); i <= 1000; i++ {
				next, r, write := algorithm.Apply(many, t0+i, p, 1)
				if !write {
					t.Fatalf("step %d: %+v", i, r)
				}
				many = next
			}
			once, r, write := algorithm.Apply(start, t0+1000, p, 1000)
			if !write {
				t.Fatalf("one refill of 1s: %+v", r)
			}
			if many != once {
				t.Fatalf("1000 refills of 1ms: %+v\none refill of 1s:     %+v", many, once)
			}
		})
	}
}

func TestIncompatibleState(t *testing.T) {
	p := fixed(t, 10, time.Second)
	good, _, _ := algorithm.Apply(algorithm.State{}, t0, p, 1)
	for _, tc := range []struct {
		name   string
		mutate func(*algorithm.State)
	}{
		{"schema", func(s *algorithm.State) { s.Schema = 2 }},
		{"zero schema", func(s *algorithm.State) { s.Schema = 0 }},
		{"algorithm", func(s *algorithm.State) { s.Algorithm = limiter.TokenBucket }},
		{"policy", func(s *algorithm.State) { s.PolicyID = "other" }},
		{"revision", func(s *algorithm.State) { s.Revision = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := good
			tc.mutate(&st)
			run(t, p, st, []step{
				{now: t0 + 1, cost: 1, status: incompa},
				{now: t0 - 100_000, cost: 1, status: incompa}, // compatibility is checked before the clock
			})
		})
	}
	// The other algorithms refuse a fixed-window state too.
	for _, q := range []*limiter.Policy{sliding(t, 10, time.Second), bucket(t, 10, 1, time.Second)} {
		run(t, q, good, []step{{now: t0 + 1, cost: 1, status: incompa}})
	}
}

func TestOutcomeFromReply(t *testing.T) {
	p := sliding(t, 10, time.Second)
	ok := algorithm.Reply{Status: allowed, ServerNowMs: t0, EffectiveNowMs: t0, Limit: 10, Remaining: 3, ResetAtMs: t0 + 2000}
	o := algorithm.OutcomeFromReply(p, ok, limiter.SourceMemory)
	want := limiter.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAt: time.UnixMilli(t0 + 2000),
		PolicyID: "test", PolicyRevision: 1, Source: limiter.SourceMemory, Certainty: limiter.Approximate}
	if o.Kind != limiter.Evaluated || o.Decision != want {
		t.Fatalf("allowed: %+v", o)
	}
	no := ok
	no.Status, no.RetryAfterMs = denied, 250
	if o := algorithm.OutcomeFromReply(p, no, limiter.SourceRedis); o.Kind != limiter.Evaluated || o.Decision.Allowed ||
		o.Decision.RetryAfter != 250*time.Millisecond || o.Decision.Source != limiter.SourceRedis {
		t.Fatalf("denied: %+v", o)
	}
	for _, tc := range []struct {
		name     string
		r        algorithm.Reply
		kind     limiter.OutcomeKind
		category string
		err      error
	}{
		{"clock unsafe", algorithm.Reply{Status: unsafe, Limit: 10}, limiter.Unavailable, limiter.CategoryClockUnsafe, limiter.ErrClockUnsafe},
		{"incompatible", algorithm.Reply{Status: incompa, Limit: 10}, limiter.Incompatible, limiter.CategoryStateIncompatible, limiter.ErrStateIncompatible},
		{"invalid", algorithm.Reply{Status: algorithm.StatusInvalid}, limiter.Incompatible, limiter.CategoryProgramInvalid, limiter.ErrProgramInvalid},
		{"unknown status", algorithm.Reply{Status: 99}, limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"other limit", func() algorithm.Reply { r := ok; r.Limit = 11; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"remaining above limit", func() algorithm.Reply { r := ok; r.Remaining = 11; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"negative remaining", func() algorithm.Reply { r := ok; r.Remaining = -1; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"allowed with retry", func() algorithm.Reply { r := ok; r.RetryAfterMs = 1; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"denied without retry", func() algorithm.Reply { r := no; r.RetryAfterMs = 0; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := algorithm.OutcomeFromReply(p, tc.r, limiter.SourceMemory)
			if o.Kind != tc.kind || o.Category != tc.category || !errors.Is(o.Err, tc.err) {
				t.Fatalf("got %v/%s (%v), want %v/%s (%v)", o.Kind, o.Category, o.Err, tc.kind, tc.category, tc.err)
			}
			if tc.kind == limiter.Unavailable && o.RetryAfter <= 0 {
				t.Fatalf("no retry hint: %+v", o)
			}
		})
	}
}

func gcraPolicy(t testing.TB, burst, limit int64, period time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.GCRA,
		Params: limiter.GCRAParams{Burst: burst, Limit: limit, Period: period}})
}

func TestGCRA(t *testing.T) {
	t.Run("fractional emission interval", func(t *testing.T) {
		// 3 per second: I = 333 1/3 ms, kept exact (units of 1/3 ms).
		p := gcraPolicy(t, 3, 3, time.Second)
		st := run(t, p, algorithm.State{}, []step{
			{now: t0, cost: 1, status: allowed, remaining: 2, reset: t0 + 334}, // TAT t0+333 1/3
			{now: t0, cost: 2, status: allowed, remaining: 0, reset: t0 + 1000},
			// TAT - now = 999 ms: 1 ms of tolerance left, 333 1/3 ms wanted.
			{now: t0 + 1, cost: 1, status: denied, remaining: 0, retry: 333, reset: t0 + 1000},
			{now: t0 + 334, cost: 1, status: allowed, remaining: 0, reset: t0 + 1334}, // TAT t0+1333 1/3
		})
		if st.Epoch != t0+1333 || st.Level != 0 || st.Carry != 1 {
			t.Fatalf("state %+v: want TAT %d + 1/3 (Epoch, Carry 1), Level 0", st, t0+1333)
		}
		run(t, p, st, []step{
			// 1/3 ms short of full: 2 fit, not 3.
			{now: t0 + 1333, cost: 3, status: denied, remaining: 2, retry: 1, reset: t0 + 1334},
			{now: t0 + 1333, cost: 1, status: allowed, remaining: 1, reset: t0 + 1667},
			{now: t0 + 1333, cost: 3, status: denied, remaining: 1, retry: 334, reset: t0 + 1667},
		})
	})
	t.Run("burst", func(t *testing.T) {
		// 2 per second with a burst of 5: I = 500 ms, tolerance 2000 ms.
		p := gcraPolicy(t, 5, 2, time.Second)
		if p.Limit() != 5 || p.MaxCost() != 5 {
			t.Fatalf("limit %d, max cost %d: want the burst, 5", p.Limit(), p.MaxCost())
		}
		st := run(t, p, algorithm.State{}, []step{
			{now: t0, cost: 5, status: allowed, remaining: 0, reset: t0 + 2500},
			{now: t0 + 499, cost: 1, status: denied, remaining: 0, retry: 1, reset: t0 + 2500},
			{now: t0 + 500, cost: 1, status: allowed, remaining: 0, reset: t0 + 3000},
			{now: t0 + 1600, cost: 4, status: denied, remaining: 2, retry: 900, reset: t0 + 3000},
			{now: t0 + 5000, cost: 2, status: allowed, remaining: 3, reset: t0 + 6000}, // idle: TAT was behind now
		})
		if want := t0 + 6000 + 1000; st.ExpiresAtMs != want {
			t.Fatalf("ExpiresAtMs = %d, want %d (TAT + grace)", st.ExpiresAtMs, want)
		}
		run(t, p, st, []step{
			{now: t0 + 4000, cost: 1, status: allowed, remaining: 2, reset: t0 + 6500, eff: t0 + 5000}, // clamped
			{now: t0 + 5000 - 2001, cost: 1, status: unsafe},
			{now: t0 + 5000, cost: 3, status: denied, remaining: 2, retry: 500, reset: t0 + 6500},
		})
	})
	t.Run("zero limit", func(t *testing.T) {
		p := limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.GCRA, Params: limiter.GCRA.ParamsFor(limiter.Rate{Window: time.Minute}), MaxCost: 0})
		if p.Limit() != 0 {
			t.Fatalf("limit %d, want 0", p.Limit())
		}
	})
}

// TestGCRAIsTheTokenBucket: for the same rate and burst, GCRA replies
// exactly what the token bucket replies, request after request (random
// times, clock steps back, costs; rates with fractional intervals).
func TestGCRAIsTheTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 3))
	for run := 0; run < 200; run++ {
		limit := 1 + rng.Int64N(50)
		burst := limit + rng.Int64N(3)*rng.Int64N(40)
		period := time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		g := gcraPolicy(t, burst, limit, period)
		b := bucket(t, burst, limit, period)
		var sg, sb algorithm.State
		now := t0
		for i := 0; i < 200; i++ {
			switch rng.IntN(4) {
			case 0:
				now -= rng.Int64N(2500) // sometimes beyond the regression bound
			case 1:
				now += rng.Int64N(period.Milliseconds() * 3)
			default:
				now += rng.Int64N(period.Milliseconds()/limit + 1)
			}
			cost := 1 + rng.Int64N(min(burst, 4))
			ng, rg, wg := algorithm.Apply(sg, now, g, cost)
			nb, rb, wb := algorithm.Apply(sb, now, b, cost)
			if rg != rb || wg != wb {
				t.Fatalf("run %d step %d (burst %d, %d per %v, now %d, cost %d):\n gcra   %+v\n bucket %+v", run, i, burst, limit, period, now, cost, rg, rb)
			}
			if ng.ExpiresAtMs != nb.ExpiresAtMs {
				t.Fatalf("run %d step %d: expiry %d, token bucket %d", run, i, ng.ExpiresAtMs, nb.ExpiresAtMs)
			}
			sg, sb = ng, nb
		}
	}
}

// TestDeficitState: the state an estimate keeps (a deficit) decides every
// cost as the state it came from, for the deficit algorithms; window
// algorithms have none.
func TestDeficitState(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 4))
	for _, p := range []*limiter.Policy{gcraPolicy(t, 7, 3, time.Second), bucket(t, 7, 3, time.Second), gcraPolicy(t, 4, 4, 7*time.Millisecond)} {
		if algorithm.SketchWindows(p) != 0 {
			t.Fatalf("%v: SketchWindows %d, want 0 (a deficit)", p.Algorithm(), algorithm.SketchWindows(p))
		}
		amount, period := p.Refill()
		var st algorithm.State
		now := t0
		for i := 0; i < 500; i++ {
			now += rng.Int64N(400)
			d := algorithm.Deficit(p, st, now)
			if d < 0 || d > p.Ceiling()*period {
				t.Fatalf("%v: deficit %d out of [0, %d]", p.Algorithm(), d, p.Ceiling()*period)
			}
			est := algorithm.DeficitState(p, d, now)
			if est.Exists != (d > 0) {
				t.Fatalf("%v: DeficitState(%d) exists = %v", p.Algorithm(), d, est.Exists)
			}
			for cost := int64(1); cost <= p.Limit(); cost++ {
				_, want, _ := algorithm.Apply(st, now, p, cost)
				_, got, _ := algorithm.Apply(est, now, p, cost)
				if got != want {
					t.Fatalf("%v (amount %d, period %d): deficit %d, cost %d:\n estimate %+v\n state    %+v", p.Algorithm(), amount, period, d, cost, got, want)
				}
			}
			st, _, _ = algorithm.Apply(st, now, p, 1+rng.Int64N(p.Limit()))
		}
	}
	if w := algorithm.SketchWindows(fixed(t, 1, time.Second)); w != 1 {
		t.Errorf("fixed window: SketchWindows %d, want 1", w)
	}
	if w := algorithm.SketchWindows(sliding(t, 1, time.Second)); w != 2 {
		t.Errorf("sliding window: SketchWindows %d, want 2", w)
	}
}

// TestGCRAParams: a field error names GCRA's field (burst, limit, period),
// not the token bucket's it is checked as.
func TestGCRAParams(t *testing.T) {
	for _, tc := range []struct {
		prm   limiter.GCRAParams
		field string
	}{
		{limiter.GCRAParams{Burst: -1, Limit: 1, Period: time.Second}, "burst"},
		{limiter.GCRAParams{Burst: 1, Limit: 0, Period: time.Second}, "limit"},
		{limiter.GCRAParams{Burst: 1, Limit: 1, Period: 0}, "period"},
		{limiter.GCRAParams{Burst: 1, Limit: 1, Period: time.Second + time.Microsecond}, "period"},
		{limiter.GCRAParams{Burst: limiter.MaxSafeInteger, Limit: 1, Period: time.Second}, "burst"},
	} {
		_, err := limiter.NewPolicy(limiter.PolicySpec{ID: "g", Algorithm: limiter.GCRA, Params: tc.prm})
		var fe *limiter.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("NewPolicy(%+v) = %v, want a field error on %s", tc.prm, err, tc.field)
		}
	}
}

func slidingLog(t testing.TB, limit int64, window time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.SlidingLog,
		Params: limiter.SlidingLogParams{Limit: limit, Window: window}})
}

// logOf packs (time, cost) pairs as State.Log.
func logOf(hits ...int64) string {
	var b []byte
	for i := 0; i < len(hits); i += 2 {
		b = algorithm.AppendSlidingLogEntry(b, hits[i], hits[i+1])
	}
	return string(b)
}

func TestSlidingLog(t *testing.T) {
	const m = 60_000
	t.Run("five logins per fifteen minutes", func(t *testing.T) {
		p := slidingLog(t, 5, 15*time.Minute)
		w := int64(15 * m)
		st := run(t, p, algorithm.State{}, []step{
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
		st := run(t, p, algorithm.State{}, []step{
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
		st := run(t, p, algorithm.State{}, []step{{now: t0 + 500, cost: 1, status: allowed, remaining: 1, reset: t0 + 1500}})
		run(t, p, st, []step{
			// Clamped to t0 + 500: logged there, in the same entry.
			{now: t0 + 100, cost: 1, status: allowed, remaining: 0, reset: t0 + 1500, eff: t0 + 500},
			{now: t0 + 500 - 2001, cost: 1, status: unsafe},
		})
	})
	t.Run("lowered limit", func(t *testing.T) {
		p := slidingLog(t, 2, time.Second)
		st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1,
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
		st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1,
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
		st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1,
			LastObservedMs: 10, Epoch: 0, Carry: 2, Level: 1}
		st = run(t, p, st, []step{{now: 20, cost: 1, status: allowed, remaining: 1, reset: 1020}})
		if st.Log != logOf(0, 2, 20, 2) { // the 1 of window 0 at now, with the new hit
			t.Fatalf("log %x", st.Log)
		}
		run(t, p, st, []step{{now: 1000, cost: 2, status: allowed, remaining: 1, reset: 2000}})
	})
	t.Run("foreign logs are incompatible", func(t *testing.T) {
		p := slidingLog(t, 5, time.Second)
		base := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1, LastObservedMs: t0}
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
			if _, r, write := algorithm.Apply(st, t0+1, p, 1); r.Status != algorithm.StatusStateIncompatible || write {
				t.Errorf("%s: %s, write %v", name, r.Status, write)
			}
		}
		for name, st := range map[string]algorithm.State{
			"counts above the maximum": {Level: limiter.MaxSlidingLogLimit + 1, Epoch: t0 / 1000},
			"a window beyond 2^53 ms":  {Level: 1, Epoch: limiter.MaxSafeInteger/1000 + 1},
			"negative counts":          {Carry: -1, Epoch: t0 / 1000},
		} {
			st.Exists, st.Schema, st.Algorithm, st.PolicyID, st.Revision, st.LastObservedMs = true, algorithm.StateSchema, limiter.SlidingLog, p.ID(), 1, t0
			if _, r, write := algorithm.Apply(st, t0+1, p, 1); r.Status != algorithm.StatusStateIncompatible || write {
				t.Errorf("%s: %s, write %v", name, r.Status, write)
			}
		}
		// Checked after the clock rule (as the Lua step reads the log).
		bad := base
		bad.Log = logOf(t0, 0)
		if _, r, _ := algorithm.Apply(bad, t0-5000, p, 1); r.Status != algorithm.StatusClockUnsafe {
			t.Errorf("a foreign log behind an unsafe clock: %s, want CLOCK_UNSAFE", r.Status)
		}
		other := base
		other.Algorithm, other.Log = limiter.FixedWindow, logOf(t0, 1)
		fp := fixed(t, 5, time.Second)
		other.PolicyID = fp.ID()
		if _, r, _ := algorithm.Apply(other, t0, fp, 1); r.Status != algorithm.StatusStateIncompatible {
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
		var st algorithm.State
		var hits [][2]int64  // every admitted hit: time, cost
		var holds [][2]int64 // every denial: until, cost
		now, last := t0, int64(0)
		for i := 0; i < 200; i++ {
			now += rng.Int64N(w/3+2) - rng.Int64N(w/10+2)
			cost := 1 + rng.Int64N(limit)
			next, r, write := algorithm.Apply(st, now, p, cost)
			if r.Status == algorithm.StatusClockUnsafe {
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

// TestCheckUncommitted: for an allowed request, uncommitted is the reply of the same
// state before the cost: remaining + cost, and the reset point a following
// zero-cost look would see; for every other status it equals the reply.
func TestCheckUncommitted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pols := []*limiter.Policy{fixed(t, 10, time.Second), sliding(t, 10, time.Second), bucket(t, 10, 3, 7*time.Millisecond)}
	for i := 0; i < 3000; i++ {
		p := pols[i%3]
		var st algorithm.State
		now := t0 + rng.Int64N(5000)
		if rng.IntN(4) > 0 {
			// A state from an earlier allowed request.
			st, _, _ = algorithm.Apply(algorithm.State{}, now-rng.Int64N(1500), p, 1+rng.Int64N(10))
		}
		cost := 1 + rng.Int64N(10)
		next, reply, uncommitted, write := algorithm.Check(st, now, p, cost)
		n2, r2, w2 := algorithm.Apply(st, now, p, cost)
		if n2 != next || r2 != reply || w2 != write {
			t.Fatalf("Apply and Check differ")
		}
		if reply.Status != algorithm.StatusAllowed {
			if uncommitted != reply {
				t.Fatalf("%s: uncommitted %+v differs from %+v", reply.Status, uncommitted, reply)
			}
			continue
		}
		if uncommitted.Status != algorithm.StatusAllowed || uncommitted.Remaining != reply.Remaining+cost || uncommitted.RetryAfterMs != 0 ||
			uncommitted.ResetAtMs > reply.ResetAtMs || uncommitted.ResetAtMs < uncommitted.EffectiveNowMs || uncommitted.Limit != reply.Limit {
			t.Fatalf("%s cost %d: reply %+v uncommitted %+v", p.Algorithm(), cost, reply, uncommitted)
		}
		if p.Algorithm() == limiter.FixedWindow && uncommitted.ResetAtMs != reply.ResetAtMs {
			t.Fatalf("fixed window uncommitted reset %d, reply %d", uncommitted.ResetAtMs, reply.ResetAtMs)
		}
	}
	// Exact uncommitted reset points.
	tb := bucket(t, 10, 1, time.Second)
	_, r, h, _ := algorithm.Check(algorithm.State{}, t0, tb, 3)
	if r.ResetAtMs != t0+3000 || h.ResetAtMs != t0 || h.Remaining != 10 {
		t.Fatalf("token bucket: reply %+v uncommitted %+v", r, h)
	}
	sw := sliding(t, 10, time.Second)
	_, r, h, _ = algorithm.Check(algorithm.State{}, t0+100, sw, 3)
	if r.ResetAtMs != t0+2000 || h.ResetAtMs != t0+100 || h.Remaining != 10 {
		t.Fatalf("sliding window: reply %+v uncommitted %+v", r, h)
	}
}
