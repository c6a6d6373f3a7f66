package limiter_test

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// t0 is an arbitrary epoch-aligned start (a multiple of every window used).
const t0 int64 = 1_700_000_000_000

// step is one evaluation of a step table: the request (store time and cost)
// and the reply fields it must produce. eff is the expected effective time
// when it differs from now (a clamped clock).
type step struct {
	now, cost int64
	status    limiter.Status
	remaining int64
	retry     int64
	reset     int64
	eff       int64
}

// run drives Apply through steps, keeping the state between them like a
// store would, and checks every reply field and the write rules.
func run(t *testing.T, p *limiter.Policy, st limiter.State, steps []step) limiter.State {
	t.Helper()
	for i, s := range steps {
		next, r, write := limiter.Apply(st, s.now, p, s.cost)
		eff := s.now
		if s.eff != 0 {
			eff = s.eff
		}
		want := limiter.Reply{Status: s.status, ServerNowMs: s.now, EffectiveNowMs: eff, Limit: p.Limit(),
			Remaining: s.remaining, RetryAfterMs: s.retry, ResetAtMs: s.reset}
		if s.status == limiter.StatusClockUnsafe || s.status == limiter.StatusStateIncompatible {
			want = limiter.Reply{Status: s.status, ServerNowMs: s.now, EffectiveNowMs: s.now, Limit: p.Limit()}
		}
		if r != want {
			t.Fatalf("step %d: Apply(now=%d, cost=%d)\n got %+v\nwant %+v", i, s.now, s.cost, r, want)
		}
		if write != (s.status == limiter.StatusAllowed) {
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
	allowed = limiter.StatusAllowed
	denied  = limiter.StatusDenied
	unsafe  = limiter.StatusClockUnsafe
	incompa = limiter.StatusStateIncompatible
)

func TestFixedWindow(t *testing.T) {
	p := fixed(t, 10, time.Second)
	end := t0 + 1000
	t.Run("boundary after denial", func(t *testing.T) {
		run(t, p, limiter.State{}, []step{
			{now: t0, cost: 7, status: allowed, remaining: 3, reset: end},
			{now: t0 + 1, cost: 4, status: denied, remaining: 3, retry: 999, reset: end}, // cost > remaining
			{now: t0 + 2, cost: 3, status: allowed, remaining: 0, reset: end},            // the denial consumed nothing
			{now: t0 + 3, cost: 1, status: denied, remaining: 0, retry: 997, reset: end},
			{now: t0 + 999, cost: 1, status: denied, remaining: 0, retry: 1, reset: end},
		})
	})
	t.Run("window roll", func(t *testing.T) {
		run(t, p, limiter.State{}, []step{
			{now: t0 + 500, cost: 10, status: allowed, remaining: 0, reset: end},
			{now: t0 + 999, cost: 1, status: denied, remaining: 0, retry: 1, reset: end},
			{now: t0 + 1000, cost: 10, status: allowed, remaining: 0, reset: t0 + 2000},
			{now: t0 + 1999, cost: 1, status: denied, remaining: 0, retry: 1, reset: t0 + 2000},
			{now: t0 + 7250, cost: 1, status: allowed, remaining: 9, reset: t0 + 8000}, // several windows later
		})
	})
	t.Run("clock", func(t *testing.T) {
		// Default max clock regression: 2s.
		run(t, p, limiter.State{}, []step{
			{now: t0 + 900, cost: 1, status: allowed, remaining: 9, reset: end},
			{now: t0 + 100, cost: 1, status: allowed, remaining: 8, reset: end, eff: t0 + 900},        // small step back: clamped
			{now: t0 + 900 - 2000, cost: 1, status: allowed, remaining: 7, reset: end, eff: t0 + 900}, // exactly the threshold
			{now: t0 + 900 - 2001, cost: 1, status: unsafe},                                           // beyond: refused
			{now: t0 + 950, cost: 1, status: allowed, remaining: 6, reset: end},
			{now: 0, cost: 1, status: unsafe},
		})
	})
	t.Run("ttl", func(t *testing.T) {
		st := run(t, p, limiter.State{}, []step{{now: t0 + 300, cost: 1, status: allowed, remaining: 9, reset: end}})
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
		run(t, p, limiter.State{}, []step{
			{now: t0, cost: max - 1, status: allowed, remaining: 1, reset: wend},
			{now: t0, cost: 2, status: denied, remaining: 1, retry: wend - t0, reset: wend},
			{now: t0, cost: 1, status: allowed, remaining: 0, reset: wend},
			{now: t0, cost: max, status: denied, remaining: 0, retry: wend - t0, reset: wend},
			{now: wend, cost: max, status: allowed, remaining: 0, reset: wend + 3_600_000},
		})
	})
	t.Run("lowered limit, same revision", func(t *testing.T) {
		big := fixed(t, 100, time.Second)
		st := run(t, big, limiter.State{}, []step{{now: t0, cost: 50, status: allowed, remaining: 50, reset: end}})
		run(t, p, st, []step{{now: t0 + 1, cost: 1, status: denied, remaining: 0, retry: 999, reset: end}})
	})
}

func TestSlidingWindow(t *testing.T) {
	p := sliding(t, 10, time.Second)
	t.Run("boundary, roll and retry", func(t *testing.T) {
		run(t, p, limiter.State{}, []step{
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
		run(t, p, limiter.State{}, []step{
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
		prev := run(t, p, limiter.State{}, []step{{now: t0, cost: 600, status: allowed, remaining: 400, reset: t0 + 2000}})
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
		st := run(t, p, limiter.State{}, []step{
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
		st := run(t, p, limiter.State{}, []step{{now: start, cost: limit, status: allowed, remaining: 0, reset: start + 2*window}})
		for _, e := range []int64{0, 1, window / 3, window / 2, window - 1} {
			// Exact reference with big integers: ceil(limit * ceil((window-e)*S / window) / S).
			w := ceilBig(big.NewInt(0).Mul(big.NewInt(window-e), big.NewInt(limiter.SlidingScale)), big.NewInt(window))
			part := ceilBig(w.Mul(w, big.NewInt(limit)), big.NewInt(limiter.SlidingScale)).Int64()
			_, r, _ := limiter.Apply(st, start+window+e, p, 1)
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
		run(t, p, limiter.State{}, []step{
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
		st := run(t, p, limiter.State{}, []step{
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
		st := run(t, p, limiter.State{}, []step{
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
		run(t, p, limiter.State{}, []step{
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
			start, _, _ := limiter.Apply(limiter.State{}, t0, p, 999_000)
			many := start
			for i := int64(1); i <= 1000; i++ {
				next, r, write := limiter.Apply(many, t0+i, p, 1)
				if !write {
					t.Fatalf("step %d: %+v", i, r)
				}
				many = next
			}
			once, r, write := limiter.Apply(start, t0+1000, p, 1000)
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
	good, _, _ := limiter.Apply(limiter.State{}, t0, p, 1)
	for _, tc := range []struct {
		name   string
		mutate func(*limiter.State)
	}{
		{"schema", func(s *limiter.State) { s.Schema = 2 }},
		{"zero schema", func(s *limiter.State) { s.Schema = 0 }},
		{"algorithm", func(s *limiter.State) { s.Algorithm = limiter.TokenBucket }},
		{"policy", func(s *limiter.State) { s.PolicyID = "other" }},
		{"revision", func(s *limiter.State) { s.Revision = 2 }},
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
	ok := limiter.Reply{Status: allowed, ServerNowMs: t0, EffectiveNowMs: t0, Limit: 10, Remaining: 3, ResetAtMs: t0 + 2000}
	o := limiter.OutcomeFromReply(p, ok, limiter.SourceMemory)
	want := limiter.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAt: time.UnixMilli(t0 + 2000),
		PolicyID: "test", PolicyRevision: 1, Source: limiter.SourceMemory, Certainty: limiter.Approximate}
	if o.Kind != limiter.Evaluated || o.Decision != want {
		t.Fatalf("allowed: %+v", o)
	}
	no := ok
	no.Status, no.RetryAfterMs = denied, 250
	if o := limiter.OutcomeFromReply(p, no, limiter.SourceRedis); o.Kind != limiter.Evaluated || o.Decision.Allowed ||
		o.Decision.RetryAfter != 250*time.Millisecond || o.Decision.Source != limiter.SourceRedis {
		t.Fatalf("denied: %+v", o)
	}
	for _, tc := range []struct {
		name     string
		r        limiter.Reply
		kind     limiter.OutcomeKind
		category string
		err      error
	}{
		{"clock unsafe", limiter.Reply{Status: unsafe, Limit: 10}, limiter.Unavailable, limiter.CategoryClockUnsafe, limiter.ErrClockUnsafe},
		{"incompatible", limiter.Reply{Status: incompa, Limit: 10}, limiter.Incompatible, limiter.CategoryStateIncompatible, limiter.ErrStateIncompatible},
		{"invalid", limiter.Reply{Status: limiter.StatusInvalid}, limiter.Incompatible, limiter.CategoryProgramInvalid, limiter.ErrProgramInvalid},
		{"unknown status", limiter.Reply{Status: 99}, limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"other limit", func() limiter.Reply { r := ok; r.Limit = 11; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"remaining above limit", func() limiter.Reply { r := ok; r.Remaining = 11; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"negative remaining", func() limiter.Reply { r := ok; r.Remaining = -1; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"allowed with retry", func() limiter.Reply { r := ok; r.RetryAfterMs = 1; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
		{"denied without retry", func() limiter.Reply { r := no; r.RetryAfterMs = 0; return r }(), limiter.Incompatible, limiter.CategoryReplyMalformed, limiter.ErrReplyMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := limiter.OutcomeFromReply(p, tc.r, limiter.SourceMemory)
			if o.Kind != tc.kind || o.Category != tc.category || !errors.Is(o.Err, tc.err) {
				t.Fatalf("got %v/%s (%v), want %v/%s (%v)", o.Kind, o.Category, o.Err, tc.kind, tc.category, tc.err)
			}
			if tc.kind == limiter.Unavailable && o.RetryAfter <= 0 {
				t.Fatalf("no retry hint: %+v", o)
			}
		})
	}
}
