package limiter_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func gcraPolicy(t testing.TB, burst, limit int64, period time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.GCRA,
		Params: limiter.GCRAParams{Burst: burst, Limit: limit, Period: period}})
}

func TestGCRA(t *testing.T) {
	t.Run("fractional emission interval", func(t *testing.T) {
		// 3 per second: I = 333 1/3 ms, kept exact (units of 1/3 ms).
		p := gcraPolicy(t, 3, 3, time.Second)
		st := run(t, p, limiter.State{}, []step{
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
		st := run(t, p, limiter.State{}, []step{
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
		var sg, sb limiter.State
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
			ng, rg, wg := limiter.Apply(sg, now, g, cost)
			nb, rb, wb := limiter.Apply(sb, now, b, cost)
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
		if p.SketchWindows() != 0 {
			t.Fatalf("%v: SketchWindows %d, want 0 (a deficit)", p.Algorithm(), p.SketchWindows())
		}
		amount, period := p.Refill()
		var st limiter.State
		now := t0
		for i := 0; i < 500; i++ {
			now += rng.Int64N(400)
			d := p.Deficit(st, now)
			if d < 0 || d > p.Limit()*period {
				t.Fatalf("%v: deficit %d out of [0, %d]", p.Algorithm(), d, p.Limit()*period)
			}
			est := p.DeficitState(d, now)
			if est.Exists != (d > 0) {
				t.Fatalf("%v: DeficitState(%d) exists = %v", p.Algorithm(), d, est.Exists)
			}
			for cost := int64(1); cost <= p.Limit(); cost++ {
				_, want, _ := limiter.Apply(st, now, p, cost)
				_, got, _ := limiter.Apply(est, now, p, cost)
				if got != want {
					t.Fatalf("%v (amount %d, period %d): deficit %d, cost %d:\n estimate %+v\n state    %+v", p.Algorithm(), amount, period, d, cost, got, want)
				}
			}
			st, _, _ = limiter.Apply(st, now, p, 1+rng.Int64N(p.Limit()))
		}
	}
	if w := fixed(t, 1, time.Second).SketchWindows(); w != 1 {
		t.Errorf("fixed window: SketchWindows %d, want 1", w)
	}
	if w := sliding(t, 1, time.Second).SketchWindows(); w != 2 {
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
