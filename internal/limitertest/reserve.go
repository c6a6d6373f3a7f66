package limitertest

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// RunReservations runs the reservation script on store (limiter.Reserve):
// a reserve consumes its estimate and names its reservation (HoldAt); a
// settle charges the actual usage, once; a reserve of a batch that does
// not commit takes nothing; a settle is recorded when another limit of
// its batch denies, and never blocks its batch; and concurrent reserves
// and settles against one budget stay within the bound. No reservation
// expires during the script (they live 10 minutes), so a store that
// decides by its own clock runs it too; clock, when not nil, is moved a
// ms for each reserve of the concurrent part.
func RunReservations(t *testing.T, store limiter.Store, cfg Config, clock *Clock) {
	budgetOf := func(name string, limit, estimate int64) *limiter.Policy {
		return Policy(t, limiter.PolicySpec{ID: cfg.Prefix + "-" + name, Algorithm: limiter.FixedWindow,
			Params:  limiter.FixedWindowParams{Limit: limit, Window: time.Hour},
			Reserve: limiter.Reserve{TTL: 10 * time.Minute, Estimate: estimate}})
	}
	user := Policy(t, fw(cfg.Prefix+"-user", 1))
	ctx := context.Background()
	eval := func(batch ...limiter.Request) []limiter.Outcome {
		t.Helper()
		out := make([]limiter.Outcome, len(batch))
		store.Evaluate(ctx, batch, out)
		for i, o := range out {
			if o.Kind != limiter.Evaluated {
				t.Fatalf("request %d of %+v: %+v", i, batch, o)
			}
		}
		return out
	}
	remaining := func(p *limiter.Policy, s limiter.SubjectDigest) int64 {
		t.Helper()
		return eval(limiter.Request{Policy: p, Subject: s, Cost: 1, Role: limiter.RoleCheck})[0].Decision.Remaining
	}
	settle := func(p *limiter.Policy, s limiter.SubjectDigest, at time.Time, actual int64) limiter.Request {
		var ms int64
		if !at.IsZero() {
			ms = at.UnixMilli()
		}
		return limiter.Request{Policy: p, Subject: s, Cost: actual, Lease: limiter.LeaseRelease, LeaseAt: ms}
	}

	t.Run("reserve and settle", func(t *testing.T) {
		p, s := budgetOf("budget", 1000, 0), Subject(cfg.Prefix+"-tenant")
		a := eval(limiter.Request{Policy: p, Subject: s, Cost: 400})[0].Decision
		b := eval(limiter.Request{Policy: p, Subject: s, Cost: 400})[0].Decision
		if !a.Allowed || !a.Consumed || a.Remaining != 600 || a.HoldAt.IsZero() || b.Remaining != 200 || !b.HoldAt.After(a.HoldAt) ||
			a.Reserved != 400 || b.Reserved != 800 {
			t.Fatalf("two reserves of 400: %+v, %+v", a, b)
		}
		if c := eval(limiter.Request{Policy: p, Subject: s, Cost: 400})[0].Decision; c.Allowed || c.Consumed || !c.HoldAt.IsZero() || c.Reserved != 800 {
			t.Fatalf("a reserve past the budget: %+v", c)
		}
		if c := eval(limiter.Request{Policy: p, Subject: s, Cost: 1, Role: limiter.RoleCheck})[0].Decision; c.Reserved != 800 || c.Expired != 0 {
			t.Fatalf("a check: %+v, want 800 reserved", c)
		}
		if d := eval(settle(p, s, a.HoldAt, 100))[0].Decision; !d.Consumed || d.Remaining != 500 || d.Reserved != 400 {
			t.Fatalf("a settle of 100 for 400: %+v", d)
		}
		eval(settle(p, s, a.HoldAt, 0))                         // replayed
		eval(settle(p, s, a.HoldAt.Add(time.Millisecond*7), 0)) // unknown
		if got := remaining(p, s); got != 500 {
			t.Fatalf("remaining %d after a replayed and an unknown settle, want 500", got)
		}
		if d := eval(settle(p, s, b.HoldAt, 1000))[0].Decision; d.Allowed || !d.Consumed || d.Remaining != 0 || d.Reserved != 0 {
			t.Fatalf("a settle of 1000 for 400, past the limit: %+v", d)
		}
	})

	// Within one slot (a store without slots, or subjects that share one):
	// a Redis Cluster keeps a reserve its slot committed (docs/consistency.md).
	t.Run("a reserve of a batch that does not commit", func(t *testing.T) {
		p, s, u := budgetOf("uncommitted", 1000, 0), Subject(cfg.Prefix+"-tenant"), Subject(cfg.Prefix+"-u1")
		eval(limiter.Request{Policy: user, Subject: u, Cost: 1})
		eval(limiter.Request{Policy: p, Subject: s, Cost: 100})
		out := eval(limiter.Request{Policy: p, Subject: s, Cost: 400}, limiter.Request{Policy: user, Subject: u, Cost: 1})
		if d := out[0].Decision; !d.Allowed || d.Consumed || !d.HoldAt.IsZero() || d.Remaining != 900 || d.Reserved != 100 {
			t.Fatalf("the reserve of a batch another limit denies: %+v, want 900 left and 100 reserved", d)
		}
		if got := remaining(p, s); got != 900 {
			t.Fatalf("remaining %d, want 900: the reserve was taken", got)
		}
	})

	t.Run("a settle beside a denial", func(t *testing.T) {
		p, s := budgetOf("beside", 1000, 0), Subject(cfg.Prefix+"-tenant")
		u1, u2 := Subject(cfg.Prefix+"-u2"), Subject(cfg.Prefix+"-u3")
		held := eval(limiter.Request{Policy: p, Subject: s, Cost: 400})[0].Decision.HoldAt
		eval(limiter.Request{Policy: user, Subject: u1, Cost: 1})
		// The user denies: the settle is recorded all the same.
		out := eval(settle(p, s, held, 700), limiter.Request{Policy: user, Subject: u1, Cost: 1})
		if !out[0].Decision.Consumed || out[1].Decision.Allowed {
			t.Fatalf("a settle beside a denial: %+v", out)
		}
		if got := remaining(p, s); got != 300 {
			t.Fatalf("remaining %d after the settle of 700, want 300", got)
		}
		// A settle past the limit is denied, and does not block the user.
		out = eval(settle(p, s, time.Time{}, 900), limiter.Request{Policy: user, Subject: u2, Cost: 1})
		if out[0].Decision.Allowed || !out[0].Decision.Consumed || !out[1].Decision.Consumed {
			t.Fatalf("a settle past the limit beside an allowed user: %+v", out)
		}
	})

	if clock != nil {
		t.Run("expiry", func(t *testing.T) {
			p, s := budgetOf("expiry", 1000, 0), Subject(cfg.Prefix+"-tenant")
			a := eval(limiter.Request{Policy: p, Subject: s, Cost: 400})[0].Decision
			eval(limiter.Request{Policy: p, Subject: s, Cost: 100})
			clock.Advance(p.Reserve().TTL + time.Second)
			// Expired unsettled, the reservations stay charged; the
			// reserve that drops them counts them, once.
			if c := eval(limiter.Request{Policy: p, Subject: s, Cost: 1, Role: limiter.RoleCheck})[0].Decision; c.Reserved != 0 || c.Expired != 0 || c.Remaining != 500 {
				t.Fatalf("a check after the TTL: %+v, want 500 left, nothing reserved", c)
			}
			if d := eval(limiter.Request{Policy: p, Subject: s, Cost: 50})[0].Decision; !d.Consumed || d.Expired != 2 || d.Reserved != 50 || d.Remaining != 450 {
				t.Fatalf("a reserve after the TTL: %+v, want 2 expired, 50 reserved, 450 left", d)
			}
			if d := eval(limiter.Request{Policy: p, Subject: s, Cost: 50})[0].Decision; d.Expired != 0 || d.Reserved != 100 {
				t.Fatalf("the next reserve: %+v, want none expired, 100 reserved", d)
			}
			if d := eval(settle(p, s, a.HoldAt, 0))[0].Decision; d.Remaining != 400 {
				t.Fatalf("a settle after the TTL: %+v, want nothing given back", d)
			}
		})
	}

	t.Run("concurrent budget", func(t *testing.T) {
		runBudget(t, store, budgetOf("concurrent", 20_000, 500), Subject(cfg.Prefix+"-tenant"), clock)
	})
}

// runBudget: 40 goroutines reserve 500 of a budget of 20,000 and settle
// 300 to 700 of it, until the budget denies them; then one drains what is
// left. What the admitted reservations used is at most the budget plus
// their excesses, and at least 90% of the budget is used.
func runBudget(t *testing.T, store limiter.Store, p *limiter.Policy, s limiter.SubjectDigest, clock *Clock) {
	const workers = 40
	budget, estimate := p.Limit(), p.Reserve().Estimate
	var used, excess, reserves atomic.Int64
	// one reserves, then settles a usage of 300 to 700; it reports false
	// when the reserve is denied.
	one := func(rng *rand.Rand) bool {
		out := make([]limiter.Outcome, 1)
		if clock != nil {
			clock.Advance(time.Millisecond)
		}
		store.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: s, Cost: 1}}, out)
		d := out[0].Decision
		if out[0].Kind != limiter.Evaluated || !d.Allowed {
			return false
		}
		if !d.Consumed || d.HoldAt.IsZero() {
			t.Errorf("an allowed reserve: %+v", d)
			return false
		}
		reserves.Add(1)
		actual := 300 + rng.Int64N(401)
		store.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: s, Cost: actual,
			Lease: limiter.LeaseRelease, LeaseAt: d.HoldAt.UnixMilli()}}, out)
		if out[0].Kind != limiter.Evaluated || !out[0].Decision.Consumed {
			t.Errorf("a settle: %+v", out[0])
		}
		used.Add(actual)
		excess.Add(max(0, actual-estimate))
		return true
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 40))
			for one(rng) {
			}
		}()
	}
	wg.Wait()
	concurrent := used.Load()
	rng := rand.New(rand.NewPCG(41, 40))
	for one(rng) {
	}
	t.Logf("%d reserves: %d used of %d (%d by the %d workers), excess %d", reserves.Load(), used.Load(), budget, concurrent, workers, excess.Load())
	if u, x := used.Load(), excess.Load(); u > budget+x {
		t.Errorf("used %d, above the budget %d plus the excess %d", u, budget, x)
	}
	if u := used.Load(); u*10 < budget*9 {
		t.Errorf("used %d of %d: the reservations starved the budget", u, budget)
	}
}
