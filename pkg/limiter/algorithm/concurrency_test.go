package algorithm_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

func concurrencyPolicy(t *testing.T, limit int64, ttl time.Duration) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: "inflight", Algorithm: limiter.Concurrency,
		Params: limiter.ConcurrencyParams{Limit: limit, LeaseTTL: ttl}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// leaseStep is one operation of a lease script and what it must answer.
type leaseStep struct {
	at        int64
	op        limiter.LeaseOp
	leaseAt   int64 // a release's or return's identity: the take's expiry
	cost      int64
	check     bool // a check or probe: consumes nothing
	status    algorithm.Status
	remaining int64
	retry     int64
	resetAt   int64
}

func runLeases(t *testing.T, p *limiter.Policy, steps []leaseStep) {
	t.Helper()
	set := ""
	for i, s := range steps {
		next, r, exp, write := algorithm.Lease(set, s.at, p, s.op, s.leaseAt, s.cost, !s.check)
		if r.Status != s.status || r.Remaining != s.remaining || r.RetryAfterMs != s.retry || r.ResetAtMs != s.resetAt {
			t.Fatalf("step %d (%s %d at %d): %s remaining %d retry %d reset %d, want %s %d %d %d", i, s.op, s.cost, s.at,
				r.Status, r.Remaining, r.RetryAfterMs, r.ResetAtMs, s.status, s.remaining, s.retry, s.resetAt)
		}
		if o := algorithm.OutcomeFromReply(p, r, limiter.SourceMemory); o.Kind != limiter.Evaluated {
			t.Fatalf("step %d: reply %+v is not a decision: %v", i, r, o.Err)
		}
		if write {
			if next != "" && exp != r.ResetAtMs+p.CleanupGraceMillis() {
				t.Fatalf("step %d: expires at %d, want reset-at %d + grace", i, exp, r.ResetAtMs)
			}
			set = next
		}
	}
}

func TestLeaseTakeReleaseExpire(t *testing.T) {
	p := concurrencyPolicy(t, 2, 10*time.Second)
	A, D := algorithm.StatusAllowed, algorithm.StatusDenied
	runLeases(t, p, []leaseStep{
		{at: 1000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 1, resetAt: 11000},
		{at: 2000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 0, resetAt: 12000},
		// Full: the third waits for the first lease's expiry.
		{at: 3000, op: limiter.LeaseTake, cost: 1, status: D, remaining: 0, retry: 8000, resetAt: 12000},
		// A check asks without taking.
		{at: 3000, op: limiter.LeaseTake, cost: 1, check: true, status: D, remaining: 0, retry: 8000, resetAt: 12000},
		// A release returns the soonest-expiring lease (the first).
		{at: 4000, op: limiter.LeaseRelease, cost: 1, status: A, remaining: 1, resetAt: 12000},
		{at: 4000, op: limiter.LeaseTake, cost: 1, check: true, status: A, remaining: 1, resetAt: 12000},
		{at: 5000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 0, resetAt: 15000},
		// A return gives back the latest-expiring lease (the one just taken).
		{at: 5000, op: limiter.LeaseReturn, cost: 1, status: A, remaining: 1, resetAt: 12000},
		// The holder of the 2000 lease crashed: it expires at 12000.
		{at: 12000, op: limiter.LeaseTake, cost: 2, status: A, remaining: 0, resetAt: 22000},
		// Releases never go below zero.
		{at: 13000, op: limiter.LeaseRelease, cost: 1, status: A, remaining: 1, resetAt: 22000},
		{at: 13000, op: limiter.LeaseRelease, cost: 1, status: A, remaining: 2, resetAt: 13000},
		{at: 13000, op: limiter.LeaseRelease, cost: 1, status: A, remaining: 2, resetAt: 13000},
		{at: 13000, op: limiter.LeaseRelease, cost: 5, status: A, remaining: 2, resetAt: 13000},
		{at: 14000, op: limiter.LeaseTake, cost: 2, status: A, remaining: 0, resetAt: 24000},
		{at: 14001, op: limiter.LeaseTake, cost: 1, status: D, remaining: 0, retry: 9999, resetAt: 24000},
	})
}

// TestLeaseClockBack: a clock that steps back never expires a new lease
// before the latest held one (the set stays ordered), nor with it: each
// take's leases keep an expiry of their own.
func TestLeaseClockBack(t *testing.T) {
	p := concurrencyPolicy(t, 3, time.Second)
	A, D := algorithm.StatusAllowed, algorithm.StatusDenied
	runLeases(t, p, []leaseStep{
		{at: 5000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 2, resetAt: 6000},
		{at: 4000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 1, resetAt: 6001},
		{at: 5999, op: limiter.LeaseRelease, cost: 1, status: A, remaining: 2, resetAt: 6001},
		{at: 6000, op: limiter.LeaseTake, cost: 3, status: D, remaining: 2, retry: 1, resetAt: 6001},
		{at: 6001, op: limiter.LeaseTake, cost: 3, status: A, remaining: 0, resetAt: 7001},
	})
}

// TestLeaseTakesInOneMillisecond: takes in one millisecond get expiries of
// their own, so a release by identity gives back one take's leases only,
// and a replayed release frees nothing more.
func TestLeaseTakesInOneMillisecond(t *testing.T) {
	p := concurrencyPolicy(t, 4, time.Second)
	A := algorithm.StatusAllowed
	runLeases(t, p, []leaseStep{
		{at: 5000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 3, resetAt: 6000},
		{at: 5000, op: limiter.LeaseTake, cost: 2, status: A, remaining: 1, resetAt: 6001},
		{at: 5000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 0, resetAt: 6002},
		{at: 5000, op: limiter.LeaseRelease, leaseAt: 6000, cost: 1, status: A, remaining: 1, resetAt: 6002},
		{at: 5000, op: limiter.LeaseRelease, leaseAt: 6000, cost: 1, status: A, remaining: 1, resetAt: 6002},
		{at: 5000, op: limiter.LeaseRelease, leaseAt: 6001, cost: 2, status: A, remaining: 3, resetAt: 6002},
		{at: 5000, op: limiter.LeaseRelease, leaseAt: 6001, cost: 2, status: A, remaining: 3, resetAt: 6002},
	})
}

func TestLeaseIncompatibleSet(t *testing.T) {
	p := concurrencyPolicy(t, 3, time.Second)
	good := string(algorithm.AppendSlidingLogEntry(nil, 5000, 1))
	for name, set := range map[string]string{
		"partial":    good[:7],
		"zero count": string(algorithm.AppendSlidingLogEntry(nil, 5000, 0)),
		"descending": string(algorithm.AppendSlidingLogEntry([]byte(good), 4000, 1)),
		"zero time":  string(algorithm.AppendSlidingLogEntry(nil, 0, 1)),
	} {
		_, r, _, write := algorithm.Lease(set, 1000, p, limiter.LeaseTake, 0, 1, true)
		if r.Status != algorithm.StatusStateIncompatible || write {
			t.Errorf("%s: %s write %t", name, r.Status, write)
		}
	}
}

func TestConcurrencyPolicy(t *testing.T) {
	for _, c := range []struct {
		prm  limiter.ConcurrencyParams
		want string
	}{
		{limiter.ConcurrencyParams{Limit: limiter.MaxConcurrency + 1, LeaseTTL: time.Second}, "concurrency"},
		{limiter.ConcurrencyParams{Limit: -1, LeaseTTL: time.Second}, "concurrency"},
		{limiter.ConcurrencyParams{Limit: 1}, "lease_ttl"},
		{limiter.ConcurrencyParams{Limit: 1, LeaseTTL: limiter.MaxLeaseTTL + time.Millisecond}, "lease_ttl"},
		{limiter.ConcurrencyParams{Limit: 1, LeaseTTL: time.Microsecond}, "lease_ttl"},
	} {
		_, err := limiter.NewPolicy(limiter.PolicySpec{ID: "x", Algorithm: limiter.Concurrency, Params: c.prm})
		if fe, ok := err.(*limiter.FieldError); !ok || fe.Field != c.want {
			t.Errorf("%+v: %v, want a %s error", c.prm, err, c.want)
		}
	}
	p := concurrencyPolicy(t, 4, time.Minute)
	if !p.Leases() || p.LeaseTTLMillis() != 60000 || p.Limit() != 4 || p.DenialsHold() {
		t.Errorf("policy: leases %t ttl %d limit %d", p.Leases(), p.LeaseTTLMillis(), p.Limit())
	}
	if _, err := limiter.ParseAlgorithm("concurrency"); err == nil {
		t.Error("algorithm: concurrency parsed: a rule says concurrency: N")
	}
	// Check refuses a concurrency policy: its requests are leases.
	if _, r, _, _ := algorithm.Check(algorithm.State{}, 1000, p, 1); r.Status != algorithm.StatusInvalid {
		t.Errorf("Check on a concurrency policy: %s", r.Status)
	}
	bad := limiter.Request{Policy: concurrencyPolicy(t, 1, time.Second), Cost: 1, Lease: limiter.LeaseReturn + 1}
	if bad.Validate() == nil {
		t.Error("an unknown lease op validated")
	}
	rate, _ := limiter.NewPolicy(limiter.PolicySpec{ID: "r", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}})
	if (limiter.Request{Policy: rate, Cost: 1, Lease: limiter.LeaseRelease}).Validate() == nil {
		t.Error("a release of a rate limit validated")
	}
}

// TestLeaseReleaseByIdentity: a release that names its take's leases (the
// take's reset) gives back only those, and nothing once they expired: a
// request that outlived its lease frees no other request's lease.
func TestLeaseReleaseByIdentity(t *testing.T) {
	p := concurrencyPolicy(t, 3, 10*time.Second)
	A, D := algorithm.StatusAllowed, algorithm.StatusDenied
	runLeases(t, p, []leaseStep{
		{at: 1000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 2, resetAt: 11000},
		{at: 2000, op: limiter.LeaseTake, cost: 2, status: A, remaining: 0, resetAt: 12000},
		{at: 2500, op: limiter.LeaseTake, cost: 1, status: D, remaining: 0, retry: 8500, resetAt: 12000},
		// The second take's release gives back its own leases, not the
		// soonest-expiring one; a second release of them frees nothing more.
		{at: 3000, op: limiter.LeaseRelease, leaseAt: 12000, cost: 2, status: A, remaining: 2, resetAt: 11000},
		{at: 3000, op: limiter.LeaseRelease, leaseAt: 12000, cost: 2, status: A, remaining: 2, resetAt: 11000},
		// A release naming leases never taken frees nothing.
		{at: 3000, op: limiter.LeaseRelease, leaseAt: 11001, cost: 1, status: A, remaining: 2, resetAt: 11000},
		{at: 4000, op: limiter.LeaseTake, cost: 2, status: A, remaining: 0, resetAt: 14000},
		// The first request outlived its lease (expired at 11000): its
		// release at 12000 frees nothing of the take at 4000.
		{at: 12000, op: limiter.LeaseRelease, leaseAt: 11000, cost: 1, status: A, remaining: 1, resetAt: 14000},
		{at: 12000, op: limiter.LeaseTake, cost: 1, status: A, remaining: 0, resetAt: 22000},
		// A return by identity gives back the named take's leases, even
		// when a later take's expire after them.
		{at: 12001, op: limiter.LeaseReturn, leaseAt: 14000, cost: 1, status: A, remaining: 1, resetAt: 22000},
		// More than were taken at that expiry: only those held.
		{at: 12002, op: limiter.LeaseRelease, leaseAt: 14000, cost: 5, status: A, remaining: 2, resetAt: 22000},
	})
}

// TestLeaseInvariants: over random operations, times and TTLs (a clock
// that steps back is TestLeaseClockBack's), the held leases (counted independently, with their
// expiries) never exceed the limit, never go negative, and every reply
// says what is left.
func TestLeaseInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 30))
	for round := range 50 {
		limit := 1 + rng.Int64N(8)
		ttl := time.Duration(1+rng.Int64N(50)) * time.Millisecond
		p := concurrencyPolicy(t, limit, ttl)
		set, now := "", int64(1_000_000)
		var model []int64 // the expiry of each lease held, as Lease keeps them
		var taken []int64 // expiries takes reported, some of them long expired
		for i := range 400 {
			now += rng.Int64N(12)
			op := limiter.LeaseOp(rng.IntN(3))
			cost := 1 + rng.Int64N(limit)
			var at int64 // a release or return by identity, half the time
			if op != limiter.LeaseTake && len(taken) > 0 && rng.IntN(2) == 0 {
				at = taken[rng.IntN(len(taken))]
			}
			next, r, _, write := algorithm.Lease(set, now, p, op, at, cost, true)
			live := model[:0:0]
			for _, e := range model {
				if e > now {
					live = append(live, e)
				}
			}
			held := int64(len(live))
			switch {
			case op == limiter.LeaseTake:
				if (r.Status == algorithm.StatusAllowed) != (held+cost <= limit) {
					t.Fatalf("round %d step %d: take %d with %d held of %d: %s", round, i, cost, held, limit, r.Status)
				}
				if r.Status == algorithm.StatusAllowed {
					at := now + ttl.Milliseconds()
					if len(live) > 0 {
						at = max(at, live[len(live)-1]+1)
					}
					if r.ResetAtMs != at {
						t.Fatalf("round %d step %d: take's reset %d is not its leases' expiry %d", round, i, r.ResetAtMs, at)
					}
					for range cost {
						live = append(live, at)
					}
					taken = append(taken, at)
				}
			case at > 0:
				// Only the leases that expire at at, and only those still held.
				kept := live[:0:0]
				left := cost
				for _, e := range live {
					if e == at && left > 0 {
						left--
						continue
					}
					kept = append(kept, e)
				}
				live = kept
			case op == limiter.LeaseRelease:
				live = live[min(cost, held):]
			case op == limiter.LeaseReturn:
				live = live[:held-min(cost, held)]
			}
			if r.Remaining != limit-int64(len(live)) || r.Remaining < 0 {
				t.Fatalf("round %d step %d: %s %d: remaining %d, %d held of %d", round, i, op, cost, r.Remaining, len(live), limit)
			}
			if write {
				set = next
			}
			model = live
		}
	}
}

func TestLeaseFarFuture(t *testing.T) {
	p := concurrencyPolicy(t, 1, time.Second)
	if _, r, _, write := algorithm.Lease("", limiter.MaxSafeInteger-1000, p, limiter.LeaseTake, 0, 1, true); r.Status != algorithm.StatusInvalid || write {
		t.Errorf("a take near 2^53 ms: %s", r.Status)
	}
}
