package rlqs

import (
	"math"
	"math/bits"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// capacity returns the rate (mrps) the proxies sharing one limit's subject
// may be assigned, from the policy and the store's decision on its state
// (remaining after the usage charged so far, reset time), at now, with lag
// the time usage takes to reach the store (reports' interval plus the
// tick).
//
// What the proxies admit reaches the store lag late, so the rate is chosen
// so that it still fits in what remains:
//   - fixed window and calendar window: remaining / (timeLeft + lag),
//     timeLeft = resetAt - now (at least 1 ms). Under steady full demand
//     the store shows remaining = L - C·(elapsed - lag), which this solves
//     to C = L/W; budget left unused is spread over the time left, and the
//     rate stays bounded as the window ends.
//   - token bucket and GCRA: min(refill rate, remaining / lag');
//   - sliding window and sliding log: min(limit / window, remaining / lag');
//     lag' is lag, but at most the time the limit takes to renew (the
//     bucket's time to refill from empty; the window). A bucket smaller
//     than refill·lag never holds refill·lag, so remaining / lag would hold
//     it below its rate for good; with lag', a full bucket gives the refill
//     rate and a drained one a rate in proportion to what is left. Over
//     lag', remaining / lag' never takes more than what remains plus the
//     refill. A sliding window's own recent use shows as used, so under
//     full demand it averages about limit / (window + lag').
//
// lag counts as at least 1 ms, so nothing remaining always gives 0. The
// arithmetic is exact (128-bit intermediate) and saturates at
// math.MaxInt64. A concurrency limit admits requests in flight, not a
// rate: it gives 0, and the caller refuses such rules for RLQS.
func capacity(p *limiter.Policy, remaining int64, resetAt, now time.Time, lag time.Duration) int64 {
	if remaining <= 0 {
		return 0
	}
	lagMs := ceilMillis(lag)
	switch p.Algorithm() {
	case limiter.FixedWindow:
		return rateMrps(remaining, ceilMillis(resetAt.Sub(now))+lagMs)
	case limiter.TokenBucket, limiter.GCRA:
		amount, periodMs := p.Refill()
		// The time to refill from empty; NewPolicy keeps the product
		// within 2^53.
		refillMs := max(p.Limit()*periodMs/amount, 1)
		return min(rateMrps(amount, periodMs), rateMrps(remaining, min(lagMs, refillMs)))
	case limiter.SlidingWindow, limiter.SlidingLog:
		return min(rateMrps(p.Limit(), p.WindowMillis()), rateMrps(remaining, min(lagMs, p.WindowMillis())))
	default:
		return 0
	}
}

// rateMrps returns units per periodMs milliseconds as mrps:
// units·10^6/periodMs, rounded down, saturating at math.MaxInt64; units
// >= 0, periodMs >= 1.
func rateMrps(units, periodMs int64) int64 {
	hi, lo := bits.Mul64(uint64(units), 1_000_000)
	if hi >= uint64(periodMs) { // the quotient would not fit in 64 bits
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(periodMs))
	return int64(min(q, math.MaxInt64))
}

// ceilMillis returns d in whole milliseconds, rounded up, at least 1 (at
// most about 9.2e12, the longest time.Duration).
func ceilMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return max(ms, 1)
}
