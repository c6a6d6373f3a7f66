package redis

import (
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// TestChargeProgramAgainstApply chains random charges (costs up to the
// ceiling, twice the limit) of every algorithm charging always through the
// batch program and through Apply: the same replies, the same states (a
// token bucket in debt, a TAT beyond the tolerance, windows and logs above
// their limit), alone or among check keys (the batch-program tests mix
// charges into batches that do not commit).
func TestChargeProgramAgainstApply(t *testing.T) {
	e := newEnv(t)
	rng, n := seededRand(t, 11, 40, 10, "chains")
	cal := calendarPolicy(t, "ch.cal", 5, calendar.Day, "Europe/Berlin").Spec()
	cal.Charge = limiter.ChargeAlways
	specs := []limiter.PolicySpec{
		{ID: "ch.fw", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 10, Window: time.Hour}},
		{ID: "ch.sw", Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: 10, Window: time.Second}},
		{ID: "ch.tb", Algorithm: limiter.TokenBucket, Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 3, RefillPeriod: 700 * time.Millisecond}},
		{ID: "ch.tb2", Algorithm: limiter.TokenBucket, Params: limiter.TokenBucketParams{Capacity: 2, RefillAmount: 7, RefillPeriod: 3 * time.Millisecond}},
		{ID: "ch.gc", Algorithm: limiter.GCRA, Params: limiter.GCRAParams{Burst: 10, Limit: 3, Period: 700 * time.Millisecond}},
		{ID: "ch.sl", Algorithm: limiter.SlidingLog, Params: limiter.SlidingLogParams{Limit: 10, Window: time.Second}},
		cal,
	}
	for _, spec := range specs {
		spec.Charge = limiter.ChargeAlways
		p := limitertest.Policy(t, spec)
		for c := range n {
			key := keyOf(p, subjectOf("charge"+strconv.Itoa(c)))
			e.do("DEL", key)
			var st algorithm.State
			for range 12 {
				cost := 1 + rng.Int64N(p.MaxCost())
				pos, among := 0, 1
				if rng.IntN(3) == 0 {
					among = 2 + rng.IntN(3)
					pos = rng.IntN(among)
				}
				got := checkParityAmong(t, e, p, key, st, cost, pos, among)
				next, want, write := algorithm.Apply(st, got.ServerNowMs, p, cost)
				if got != want {
					t.Fatalf("%s: lua %+v, go %+v", p.ID(), got, want)
				}
				if write {
					st = next
				}
				if got.Status == algorithm.StatusDenied && (got.Remaining != 0 || got.RetryAfterMs < 1) {
					t.Fatalf("%s: a charge denied with %+v", p.ID(), got)
				}
			}
		}
	}
}
