package rlqs

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

func TestFairShares(t *testing.T) {
	const u = unknownDemand
	for _, tc := range []struct {
		name    string
		c       int64
		demands []int64
		want    []int64
	}{
		{"no subscribers", 100, nil, []int64{}},
		{"no capacity", 0, []int64{5, u}, []int64{0, 0}},
		{"negative capacity", -7, []int64{5, u}, []int64{0, 0}},
		{"one unknown takes all", 100, []int64{u}, []int64{100}},
		{"unknowns split equally, remainder to the first", 100, []int64{u, u, u}, []int64{34, 33, 33}},
		{"small demand met, the rest share the level", 100, []int64{10, u, u}, []int64{10, 45, 45}},
		{"demands below the share met, leftover spread over all", 100, []int64{10, 20}, []int64{45, 55}},
		{"water level between demands", 100, []int64{10, 30, 50, 70}, []int64{10, 30, 30, 30}},
		{"equal demands above the share", 10, []int64{7, 7, 7}, []int64{4, 3, 3}},
		{"zero demands get the leftover too", 9, []int64{0, 0, 0}, []int64{3, 3, 3}},
		{"negative demand counts as zero", 10, []int64{-5, u}, []int64{0, 10}},
		{"capacity below subscribers", 2, []int64{u, u, u}, []int64{1, 1, 0}},
		{"saturating capacity over unknowns", math.MaxInt64, []int64{u, u, u},
			[]int64{math.MaxInt64/3 + 1, math.MaxInt64 / 3, math.MaxInt64 / 3}},
		{"demands whose sum overflows", math.MaxInt64 - 1, []int64{math.MaxInt64 - 2, math.MaxInt64 - 2, 1},
			[]int64{(math.MaxInt64-2)/2 + 1, (math.MaxInt64 - 2) / 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]int64, len(tc.demands))
			for i := range out {
				out[i] = -1 // overwritten whatever c is
			}
			fairShares(tc.c, tc.demands, out)
			if !slices.Equal(out, tc.want) {
				t.Fatalf("fairShares(%d, %v) = %v, want %v", tc.c, tc.demands, out, tc.want)
			}
		})
	}
}

// bruteMaxMin is max-min fairness by its definition: hand out the capacity
// one unit at a time, each to the subscriber with the least so far among
// those whose demand is not met. Then, like fairShares, it spreads what is
// left (only when every demand is met) over all subscribers. Units handed
// while some demands are not met but too few for all of them at the lowest
// assignment go, in fairShares, to the equal spread instead: so the
// reference takes the level the unit filling reaches (the least assignment
// of an unmet demand) and assigns min(demand, level) before spreading.
func bruteMaxMin(c int64, demands []int64) []int64 {
	n := len(demands)
	out := make([]int64, n)
	if c <= 0 || n == 0 {
		return out
	}
	got := make([]int64, n)
	for range c {
		best := -1
		for i, d := range demands {
			if got[i] < d && (best < 0 || got[i] < got[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		got[best]++
	}
	level := int64(math.MaxInt64)
	for i, d := range demands {
		if got[i] < d {
			level = min(level, got[i])
		}
	}
	left := c
	for i, d := range demands {
		out[i] = min(d, level)
		left -= out[i]
	}
	for i := range out {
		out[i] += left / int64(n)
		if int64(i) < left%int64(n) {
			out[i]++
		}
	}
	return out
}

func TestFairSharesMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 1))
	for step := range 5000 {
		n := rng.IntN(7)
		c := rng.Int64N(300) - 20
		demands := make([]int64, n)
		for i := range demands {
			switch rng.IntN(5) {
			case 0:
				demands[i] = unknownDemand
			case 1:
				demands[i] = 0
			default:
				demands[i] = rng.Int64N(150)
			}
		}
		out := make([]int64, n)
		fairShares(c, demands, out)
		if want := bruteMaxMin(c, demands); !slices.Equal(out, want) {
			t.Fatalf("step %d: fairShares(%d, %v) = %v, brute force %v", step, c, demands, out, want)
		}
		var sum int64
		for i, a := range out {
			sum += a
			if c > 0 && a < min(demands[i], c/int64(n)) {
				t.Fatalf("step %d: fairShares(%d, %v)[%d] = %d, below min(demand, c/n)", step, c, demands, i, a)
			}
			if c <= 0 && a != 0 {
				t.Fatalf("step %d: fairShares(%d, %v) = %v, want zeros", step, c, demands, out)
			}
		}
		if sum > max(c, 0) {
			t.Fatalf("step %d: fairShares(%d, %v) = %v sums to %d > c", step, c, demands, out, sum)
		}
	}
}

func TestFairSharesLargeValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 2))
	for step := range 2000 {
		n := 1 + rng.IntN(70)
		c := rng.Int64()
		demands := make([]int64, n)
		for i := range demands {
			demands[i] = rng.Int64() >> rng.IntN(63)
		}
		out := make([]int64, n)
		fairShares(c, demands, out)
		level := waterLevel(c, demands)
		var sum int64
		unmet := false
		for i, a := range out {
			if a < 0 || a > c-sum {
				t.Fatalf("step %d: assignments overflow or exceed c=%d: %v", step, c, out)
			}
			sum += a
			if a < min(demands[i], c/int64(n)) {
				t.Fatalf("step %d: out[%d] = %d < min(%d, c/n)", step, i, a, demands[i])
			}
			if demands[i] > level {
				unmet = true
			}
		}
		// The level is the largest that fits: one more would not.
		if unmet && fits(level+1, c, demands) {
			t.Fatalf("step %d: level %d is not the largest that fits c=%d over %v", step, level, c, demands)
		}
		if !fits(level, c, demands) {
			t.Fatalf("step %d: level %d does not fit c=%d over %v", step, level, c, demands)
		}
	}
}

func TestFairSharesDoesNotAllocate(t *testing.T) {
	for _, n := range []int{1, 64, 5000} {
		demands := make([]int64, n)
		for i := range demands {
			demands[i] = int64(i * 37 % 1000)
		}
		demands[0] = unknownDemand
		out := make([]int64, n)
		if allocs := testing.AllocsPerRun(20, func() { fairShares(int64(n)*300, demands, out) }); allocs != 0 {
			t.Errorf("n=%d: %v allocations per call, want 0", n, allocs)
		}
	}
}

func BenchmarkFairShares(b *testing.B) {
	for _, n := range []int{8, 64, 5000} {
		demands := make([]int64, n)
		for i := range demands {
			demands[i] = int64(i * 7919 % 100_000)
		}
		demands[0] = unknownDemand
		out := make([]int64, n)
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				fairShares(int64(n)*30_000, demands, out)
			}
		})
	}
}
