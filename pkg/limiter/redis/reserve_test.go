package redis

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// reservingSpecs are reserving policies of every algorithm that takes
// reservations, with TTLs short enough that reservations expire during a
// chain (Redis decides by its own clock) and windows short enough that
// refunds meet another window; some charge always.
func reservingSpecs(t *testing.T) []limiter.PolicySpec {
	cal := calendarPolicy(t, "rv.cal", 50, calendar.Day, "Europe/Berlin").Spec()
	specs := []limiter.PolicySpec{
		{ID: "rv.fw", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 50, Window: time.Hour}},
		{ID: "rv.fw2", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 20, Window: 40 * time.Millisecond}},
		{ID: "rv.sw", Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: 30, Window: 50 * time.Millisecond}},
		{ID: "rv.tb", Algorithm: limiter.TokenBucket, Params: limiter.TokenBucketParams{Capacity: 30, RefillAmount: 3, RefillPeriod: 7 * time.Millisecond}},
		{ID: "rv.gc", Algorithm: limiter.GCRA, Params: limiter.GCRAParams{Burst: 30, Limit: 3, Period: 7 * time.Millisecond}},
		cal,
	}
	var out []limiter.PolicySpec
	for i, s := range specs {
		for _, charge := range []limiter.Charge{limiter.ChargeAllowed, limiter.ChargeAlways} {
			s.ID = specs[i].ID + "." + charge.String()
			s.Charge = charge
			s.Reserve = limiter.Reserve{TTL: time.Duration(3+5*i) * time.Millisecond}
			if i%2 == 1 {
				s.Reserve.Estimate = 4
			}
			out = append(out, s)
		}
	}
	return out
}

// waitServer polls Redis's TIME until it reads ms or later.
func (e *env) waitServer(ms int64) {
	e.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); e.serverNow() < ms; {
		if time.Now().After(deadline) {
			e.t.Fatalf("Redis TIME never reached %d", ms)
		}
	}
}

// runReserving runs one request (req's policy, role, lease and LeaseAt)
// on key, alone, through rate-batch-v2.lua, and returns its reply and
// whether it committed.
func (e *env) runReserving(key string, req *limiter.Request) (bool, algorithm.Reply) {
	e.t.Helper()
	args := []string{string(lua.AppendRequestPacked(nil, req.Policy, req.Cost, req.Role, req.Lease, req.LeaseAt, time.Now().UnixMilli()))}
	committed, r := e.runBatchKeys([]string{key}, args, []*limiter.Policy{req.Policy})
	return committed, r[0]
}

// TestReservationProgramAgainstCheckRequest chains random reserves,
// settles (of a held reservation, a replayed, an unknown or no identity,
// with usages below, at and above the estimate) and checks of every
// algorithm that takes reservations through the batch program on real
// Redis and through algorithm.CheckRequest at the program's TIME: the same
// replies (HoldAtMs included) and the same stored state, byte for byte
// (redistest.AppendState); the key outlives its reservations.
func TestReservationProgramAgainstCheckRequest(t *testing.T) {
	e := newEnv(t)
	rng, n := seededRand(t, 12, 12, 4, "chains")
	for _, spec := range reservingSpecs(t) {
		p := limitertest.Policy(t, spec)
		for c := range n {
			key := keyOf(p, subjectOf("reserve"+strconv.Itoa(c)))
			e.do("DEL", key)
			var st algorithm.State
			var held []int64
			for step := range 40 {
				req := limiter.Request{Policy: p, Cost: 1 + rng.Int64N(p.Limit()/2)}
				switch k := rng.IntN(10); {
				case k < 4:
				case k < 8 && len(held) > 0:
					j := rng.IntN(len(held))
					req.Lease, req.LeaseAt, req.Cost = limiter.LeaseRelease, held[j], rng.Int64N(p.MaxCost()+1)
					if rng.IntN(3) > 0 {
						held = append(held[:j], held[j+1:]...) // else: replayed later
					}
				case k < 9:
					req.Lease, req.Cost = limiter.LeaseRelease, rng.Int64N(p.MaxCost()+1)
					if rng.IntN(2) == 0 {
						req.LeaseAt = 1 + rng.Int64N(1<<40) // never held
					}
				default:
					req.Role = limiter.RoleCheck
				}
				if step%7 == 6 {
					// Let reservations expire and windows pass.
					e.waitServer(e.serverNow() + rng.Int64N(15))
				}
				committed, got := e.runReserving(key, &req)
				next, reply, uncommitted, write := algorithm.CheckRequest(st, got.ServerNowMs, &req)
				want := reply
				if !req.EffectiveRole().Consumes() {
					want, write = uncommitted, false
				}
				if got != want {
					t.Fatalf("%s step %d %+v on %+v:\n lua %+v\n go  %+v", p.ID(), step, req, st, got, want)
				}
				if committed != (req.Settles() || req.Role == limiter.RoleCheck || got.Status == algorithm.StatusAllowed) {
					t.Fatalf("%s step %d: committed %v, reply %+v", p.ID(), step, committed, got)
				}
				if write {
					st = next
				}
				if got.HoldAtMs != 0 {
					held = append(held, got.HoldAtMs)
				}
				v, _ := e.do("GET", key).(string)
				if !st.Exists {
					if v != "" {
						t.Fatalf("%s step %d: stored %x, want none", p.ID(), step, v)
					}
					continue
				}
				if w := string(redistest.AppendState(nil, st)); v != w {
					t.Fatalf("%s step %d %+v:\n stored %x\n want   %x (%+v)", p.ID(), step, req, v, w, st)
				}
				if k := len(st.Reserved) / algorithm.ReservationEntryBytes; k > 0 && write {
					last, _ := redistest.Reservation(st.Reserved, k-1)
					// The key lives at least as long as its last reservation.
					if pt := e.pttl(key); pt < last+p.CleanupGraceMillis()-e.serverNow()-2 {
						t.Fatalf("%s step %d: PTTL %d, the last reservation is at %d (now %d)", p.ID(), step, pt, last, got.ServerNowMs)
					}
				}
			}
		}
	}
}

// TestInvalidReservationArguments: a reserving key whose reservation
// extension (flag 128, '>ddddd': operation, TTL, identity, max cost,
// period start) is out of range answers INVALID (limit 0, with its
// identity field 0), blocks its request and writes nothing; the test's
// encoding is checked against the store's.
func TestInvalidReservationArguments(t *testing.T) {
	e := newEnv(t)
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "rv.inv", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 5, Window: time.Hour}, Reserve: limiter.Reserve{TTL: time.Minute}})
	key := keyOf(p, subjectOf("invalid reservation"))
	const flagReserve = 128
	good := batchFields{alg: byte(limiter.FixedWindow), flags: flagReserve, rev: 1, limit: 5, p2: float64(time.Hour.Milliseconds()),
		grace: float64(p.CleanupGraceMillis()), maxRegression: float64(p.MaxClockRegressionMillis()), cost: 1,
		ext: []float64{1, 60_000, 0, 10, 0}} // max cost: the ceiling, twice the limit
	if got, want := good.args()[0], string(lua.AppendRequestPacked(nil, p, 1, limiter.RoleOrdinary, limiter.LeaseTake, 0, 0)); got != want {
		t.Fatalf("the test's encoding %x, the store's %x", got, want)
	}
	with := func(f func(*batchFields)) []string {
		b := good
		b.ext = append([]float64(nil), good.ext...)
		f(&b)
		return b.args()
	}
	for name, args := range map[string][]string{
		"flag, no extension":         with(func(b *batchFields) { b.ext = nil }),
		"extension short":            with(func(b *batchFields) { b.ext = b.ext[:4] }),
		"operation 0":                with(func(b *batchFields) { b.ext[0] = 0 }),
		"operation 3":                with(func(b *batchFields) { b.ext[0] = 3 }),
		"TTL 0":                      with(func(b *batchFields) { b.ext[1] = 0 }),
		"TTL above a day":            with(func(b *batchFields) { b.ext[1] = 86_400_001 }),
		"fractional TTL":             with(func(b *batchFields) { b.ext[1] = 1.5 }),
		"a reserve names one":        with(func(b *batchFields) { b.ext[2] = 1000 }),
		"negative identity":          with(func(b *batchFields) { b.ext[0], b.ext[2] = 2, -1 }),
		"max cost 0":                 with(func(b *batchFields) { b.ext[3] = 0 }),
		"max cost above the ceiling": with(func(b *batchFields) { b.ext[3] = 11 }),
		"NaN period start":           with(func(b *batchFields) { b.ext[4] = math.NaN() }),
		"a reserve of cost 0":        with(func(b *batchFields) { b.cost = 0 }),
		"with a penalty flag":        with(func(b *batchFields) { b.flags |= flagPenalty; b.ext = append(b.ext, 1000, 1000, 0) }),
		"a sliding log":              with(func(b *batchFields) { b.alg = byte(limiter.SlidingLog) }),
	} {
		e.do("DEL", key)
		committed, r := e.runBatchKeys([]string{key}, args, []*limiter.Policy{p})
		if committed || r[0].Status != algorithm.StatusInvalid || r[0].Limit != 0 || r[0].HoldAtMs != 0 {
			t.Errorf("%s: committed %v, reply %+v, want INVALID", name, committed, r[0])
		}
		if e.do("EXISTS", key) != int64(0) {
			t.Errorf("%s: an INVALID reservation wrote state", name)
		}
	}
	// A settle may cost 0.
	settle := with(func(b *batchFields) { b.cost, b.ext[0] = 0, 2 })
	if _, r := e.runBatchKeys([]string{key}, settle, []*limiter.Policy{p}); r[0].Status != algorithm.StatusAllowed {
		t.Errorf("a settle of 0: %+v", r[0])
	}
}
