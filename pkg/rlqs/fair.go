package rlqs

import "math"

// unknownDemand is the demand of a subscriber whose rate is not known yet
// (its first report): it wants as much as it can get, so it takes the water
// level.
const unknownDemand = math.MaxInt64

// fairShares sets out[i] to the max-min fair assignment of capacity c
// among demands (water-filling), all in mrps: each subscriber gets
// min(demands[i], λ), λ the largest level at which the assignments still
// fit in c (waterLevel), so a demand at or below its fair share is met and
// the others share what is left equally. What remains of c after that is
// spread equally over all n subscribers (integer division, the remainder
// one each to the first ones), so that a proxy whose demand grows has
// headroom to show it before the next tick.
//
// Guarantees: out[i] >= min(demands[i], c/n); sum(out) is exactly c (all
// zeros for c <= 0). A negative demand counts as 0; unknownDemand takes
// the level. out must be at least as long as demands. No allocation,
// whatever n.
func fairShares(c int64, demands []int64, out []int64) {
	n := len(demands)
	out = out[:n]
	if c <= 0 || n == 0 {
		clear(out)
		return
	}
	level := waterLevel(c, demands)
	left := c
	for i, d := range demands {
		out[i] = min(max(d, 0), level)
		left -= out[i]
	}
	each, extra := left/int64(n), left%int64(n)
	for i := range out {
		out[i] += each
		if int64(i) < extra {
			out[i]++
		}
	}
}

// waterLevel returns the max-min water level of capacity c > 0 over
// demands: the largest λ in [0, c] with sum(min(demands[i], λ)) <= c. It
// is found by bisection on λ (at most 63 passes over demands, so
// O(n log c) with no sorting and no scratch space), between c/n, which
// always fits, and c, the most one subscriber can get. When every demand
// fits, λ is at least the largest demand, so every demand is met.
func waterLevel(c int64, demands []int64) int64 {
	lo, hi := c/int64(len(demands)), c
	// Invariant: level lo fits; no level above hi does.
	for lo < hi {
		half := hi - lo
		mid := lo + half/2 + half%2 // rounds up, so that lo moves
		if fits(mid, c, demands) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// fits reports whether sum(min(demands[i], level)) <= c, never
// overflowing.
func fits(level, c int64, demands []int64) bool {
	var sum int64
	for _, d := range demands {
		a := min(max(d, 0), level)
		if a > c-sum {
			return false
		}
		sum += a
	}
	return true
}
