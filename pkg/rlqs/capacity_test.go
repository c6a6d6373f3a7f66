package rlqs

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

func mustPolicy(t testing.TB, alg limiter.Algorithm, params limiter.Params) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: "p", Algorithm: alg, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCapacity(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const lag = 6 * time.Second // a 5 s report interval and a 1 s tick
	// 6000 per minute: 100 requests/s, 100_000 mrps.
	fixed := mustPolicy(t, limiter.FixedWindow, limiter.FixedWindowParams{Limit: 6000, Window: time.Minute})
	month := mustPolicy(t, limiter.FixedWindow, limiter.FixedWindowParams{Limit: 3_000_000, Window: 30 * 24 * time.Hour,
		Calendar: &calendar.Calendar{Unit: calendar.Month, Location: time.UTC}})
	// 10 tokens a second in a bucket of 100.
	bucket := mustPolicy(t, limiter.TokenBucket, limiter.TokenBucketParams{Capacity: 100, RefillAmount: 10, RefillPeriod: time.Second})
	// 10 a second in a bucket of 10: empty to full in 1 s.
	perSecond := mustPolicy(t, limiter.TokenBucket, limiter.TokenBucketParams{Capacity: 10, RefillAmount: 10, RefillPeriod: time.Second})
	// 5 a second, bursts of 10; 3 every 7 s.
	gcra := mustPolicy(t, limiter.GCRA, limiter.GCRAParams{Burst: 10, Limit: 5, Period: time.Second})
	slowGCRA := mustPolicy(t, limiter.GCRA, limiter.GCRAParams{Burst: 3, Limit: 3, Period: 7 * time.Second})
	// 600 per minute: 10 requests/s.
	sliding := mustPolicy(t, limiter.SlidingWindow, limiter.SlidingWindowParams{Limit: 600, Window: time.Minute})
	slidingSecond := mustPolicy(t, limiter.SlidingWindow, limiter.SlidingWindowParams{Limit: 10, Window: time.Second})
	slidingLog := mustPolicy(t, limiter.SlidingLog, limiter.SlidingLogParams{Limit: 600, Window: time.Minute})
	leases := mustPolicy(t, limiter.Concurrency, limiter.ConcurrencyParams{Limit: 10, LeaseTTL: time.Second})

	for i, st := range []struct {
		name      string
		p         *limiter.Policy
		remaining int64
		resetIn   time.Duration // resetAt - now
		lag       time.Duration
		want      int64
	}{
		// Fixed window: remaining / (time left + lag).
		{"window start, all left", fixed, 6000, time.Minute, lag, 6000 * 1_000_000 / 66_000},
		{"steady full demand: 100/s charged up to 6 s ago", fixed, 6000 - 100*24, 30 * time.Second, lag, 100_000},
		{"steady full demand later", fixed, 6000 - 100*50, 4 * time.Second, lag, 100_000},
		{"unused budget spread over the time left", fixed, 6000, 30 * time.Second, lag, 6000 * 1_000_000 / 36_000},
		{"window end: bounded by the lag", fixed, 600, 0, lag, 600 * 1_000_000 / 6001},
		{"reset already passed: 1 ms left", fixed, 600, -time.Second, lag, 600 * 1_000_000 / 6001},
		{"zero lag: remaining over the time left", fixed, 600, 10 * time.Second, 0, 600 * 1_000_000 / 10_001},
		{"time left rounds up to the millisecond", fixed, 1000, 999*time.Millisecond + 1, 0, 1000 * 1_000_000 / 1001},
		{"nothing remaining", fixed, 0, 30 * time.Second, lag, 0},
		{"in debt", fixed, -50, 30 * time.Second, lag, 0},
		{"calendar month, steady", month, 3_000_000 / 2, 15 * 24 * time.Hour, lag, 1_500_000 * 1_000_000 / (15*24*3600*1000 + 6000)},
		// Token bucket and GCRA: min(refill rate, remaining / lag).
		{"bucket full: the refill rate", bucket, 100, 0, lag, 10_000},
		{"bucket low: remaining over the lag", bucket, 30, 0, lag, 5_000},
		{"bucket at its steady level refill·lag", bucket, 60, 0, lag, 10_000},
		{"bucket empty", bucket, 0, 0, lag, 0},
		// A bucket that refills from empty in less than the lag: the lag
		// counts as that time, so a full bucket gives the refill rate.
		{"one-second bucket full: the refill rate", perSecond, 10, 0, lag, 10_000},
		{"one-second bucket half full: half the rate", perSecond, 5, 0, lag, 5_000},
		{"one-second bucket empty", perSecond, 0, 0, lag, 0},
		{"gcra full: refills in 2 s", gcra, 10, 0, lag, 5_000},
		{"gcra low: remaining over 2 s", gcra, 3, 0, lag, 1_500},
		{"gcra of 3 every 7 s, rounded down", slowGCRA, 3, 0, lag, 3 * 1_000_000 / 7000},
		// Sliding window and log: min(limit / window, remaining / lag).
		{"sliding window, all left", sliding, 600, 0, lag, 10_000},
		{"sliding window, little left", sliding, 6, 0, lag, 1_000},
		{"sliding window, none left", sliding, 0, 0, lag, 0},
		{"sliding log, all left", slidingLog, 600, 0, lag, 10_000},
		{"sliding log, little left", slidingLog, 30, 0, lag, 5_000},
		{"one-second sliding window, all left", slidingSecond, 10, 0, lag, 10_000},
		{"one-second sliding window, 4 left: over the window", slidingSecond, 4, 0, lag, 4_000},
		// Not a rate.
		{"concurrency", leases, 10, 0, lag, 0},
	} {
		got := capacity(st.p, st.remaining, t0.Add(st.resetIn), t0, st.lag)
		if got != st.want {
			t.Errorf("step %d (%s): capacity = %d mrps, want %d", i, st.name, got, st.want)
		}
	}
}

// A fixed window's proxies admitting all they are assigned at every tick,
// their usage charged to the store lag late, are assigned about limit /
// window all through the window and admit at most its limit in it.
func TestCapacityFixedWindowSteadyState(t *testing.T) {
	const (
		limit  = 6000
		window = time.Minute
		tick   = time.Second
		lag    = 6 * time.Second
	)
	p := mustPolicy(t, limiter.FixedWindow, limiter.FixedWindowParams{Limit: limit, Window: window})
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	steady := int64(limit * 1_000_000 / window.Milliseconds())
	var admitted []int64 // milli-requests admitted during each tick
	var total int64
	for now := start; now.Before(start.Add(window)); now = now.Add(tick) {
		// Usage admitted during a tick reaches the store lag after the
		// tick ends, in whole requests.
		var charged int64
		for i, a := range admitted {
			if start.Add(time.Duration(i+1)*tick+lag).Compare(now) <= 0 {
				charged += a
			}
		}
		c := capacity(p, limit-(charged+999)/1000, start.Add(window), now, lag)
		elapsed := now.Sub(start)
		if elapsed >= lag && (c < steady*99/100 || c > steady*101/100) {
			t.Errorf("at %v: capacity %d mrps, want within 1%% of %d", elapsed, c, steady)
		}
		if c > steady*101/100 {
			t.Errorf("at %v: capacity %d mrps above the window's rate %d", elapsed, c, steady)
		}
		a := c * tick.Milliseconds() / 1000 // milli-requests in one tick
		admitted = append(admitted, a)
		total += a
	}
	if total > limit*1000 || total < limit*1000*99/100 {
		t.Errorf("admitted %d milli-requests in the window, want at most the limit %d and at least 99%% of it", total, limit*1000)
	}
}

// A sliding log's proxies admitting all they are assigned, their usage
// logged lag late, never admit more than the limit in any window, and
// average about limit / (window + lag'), lag' the lag but at most one
// window: their own usage logged in the window shows as used.
func TestCapacitySlidingLogFullDemand(t *testing.T) {
	const (
		limit = 600
		tick  = time.Second
	)
	for _, tc := range []struct {
		window, lag time.Duration
		mean        int64 // mrps: limit / (window + lag')
	}{
		{time.Minute, 6 * time.Second, limit * 1_000_000 / 66_000},
		{2 * time.Second, 6 * time.Second, limit * 1_000_000 / 4_000},
	} {
		p := mustPolicy(t, limiter.SlidingLog, limiter.SlidingLogParams{Limit: limit, Window: tc.window})
		start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		ticksPerWindow := int(tc.window / tick)
		var admitted []int64 // milli-requests admitted during each tick
		for now := start; now.Before(start.Add(20 * tc.window)); now = now.Add(tick) {
			// Usage admitted during a tick is logged lag after the tick
			// ends; the log counts what was logged in the trailing window.
			var used int64
			for i, a := range admitted {
				at := start.Add(time.Duration(i+1)*tick + tc.lag)
				if at.Compare(now) <= 0 && now.Sub(at) < tc.window {
					used += a
				}
			}
			c := capacity(p, limit-(used+999)/1000, now, now, tc.lag)
			admitted = append(admitted, c*tick.Milliseconds()/1000)
		}
		var sum int64
		for i := range admitted {
			var in int64
			for _, a := range admitted[i:min(i+ticksPerWindow, len(admitted))] {
				in += a
			}
			if in > limit*1000 {
				t.Errorf("window %v, lag %v: %d milli-requests admitted in the window from tick %d, above the limit", tc.window, tc.lag, in, i)
			}
			if i >= len(admitted)/2 {
				sum += admitted[i]
			}
		}
		if mean := sum / int64(len(admitted)-len(admitted)/2); mean < tc.mean*95/100 || mean > tc.mean*105/100 {
			t.Errorf("window %v, lag %v: mean %d mrps, want within 5%% of %d", tc.window, tc.lag, mean, tc.mean)
		}
	}
}

// capacity stays exact and saturates rather than overflow, for limits up to
// 2^53-1 and windows up to ten years.
func TestCapacityLargeValues(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	year := 366 * 24 * time.Hour
	exact := func(units int64, ms int64) int64 {
		q := new(big.Int).Mul(big.NewInt(units), big.NewInt(1_000_000))
		q.Quo(q, big.NewInt(ms))
		if !q.IsInt64() {
			return math.MaxInt64
		}
		return q.Int64()
	}
	huge := mustPolicy(t, limiter.FixedWindow, limiter.FixedWindowParams{Limit: limiter.MaxSafeInteger, Window: time.Millisecond})
	yearly := mustPolicy(t, limiter.FixedWindow, limiter.FixedWindowParams{Limit: 1 << 52, Window: year})
	bigBucket := mustPolicy(t, limiter.TokenBucket, limiter.TokenBucketParams{Capacity: 1000, RefillAmount: 1 << 52, RefillPeriod: time.Millisecond})
	slidingFast := mustPolicy(t, limiter.SlidingWindow, limiter.SlidingWindowParams{Limit: limiter.MaxSafeInteger / limiter.SlidingScale, Window: time.Millisecond})
	for i, st := range []struct {
		name      string
		p         *limiter.Policy
		remaining int64
		resetIn   time.Duration
		lag       time.Duration
		want      int64
	}{
		{"2^53-1 in 1 ms saturates", huge, limiter.MaxSafeInteger, time.Millisecond, 0, math.MaxInt64},
		{"2^52 over a year", yearly, 1 << 52, year, time.Second, exact(1<<52, year.Milliseconds()+1000)},
		{"reset centuries away", yearly, 1 << 52, time.Duration(math.MaxInt64), time.Second, exact(1<<52, int64(time.Duration(math.MaxInt64)/time.Millisecond)+1+1000)},
		{"refill of 2^52 a millisecond saturates, bounded by remaining over its refill time", bigBucket, 1000, 0, time.Second, 1_000_000_000},
		{"refill of 2^52 a millisecond, unbounded lag term", bigBucket, limiter.MaxSafeInteger, 0, time.Millisecond, math.MaxInt64},
		{"sliding window at its largest limit", slidingFast, limiter.MaxSafeInteger / limiter.SlidingScale, 0, time.Millisecond,
			exact(limiter.MaxSafeInteger/limiter.SlidingScale, 1)},
	} {
		got := capacity(st.p, st.remaining, t0.Add(st.resetIn), t0, st.lag)
		if got != st.want {
			t.Errorf("step %d (%s): capacity = %d, want %d", i, st.name, got, st.want)
		}
	}
}

func TestRateMrps(t *testing.T) {
	exact := func(units, ms int64) int64 {
		q := new(big.Int).Mul(big.NewInt(units), big.NewInt(1_000_000))
		q.Quo(q, big.NewInt(ms))
		if !q.IsInt64() {
			return math.MaxInt64
		}
		return q.Int64()
	}
	cases := [][2]int64{
		{0, 1}, {1, 1}, {1, 1_000_000}, {1, 1_000_001}, {3, 7000},
		{math.MaxInt64 / 1_000_000, 1}, {math.MaxInt64/1_000_000 + 1, 1},
		// units·10^6 just past 2^64·periodMs: the 128-bit quotient's
		// high word equals the divisor.
		{18_446_744_073_710, 1}, {36_893_488_147_420, 2},
		{math.MaxInt64, 1}, {math.MaxInt64, math.MaxInt64},
	}
	rng := rand.New(rand.NewPCG(41, 3))
	for range 2000 {
		cases = append(cases, [2]int64{rng.Int64() >> rng.IntN(63), 1 + rng.Int64()>>rng.IntN(63)})
	}
	for _, c := range cases {
		if got, want := rateMrps(c[0], c[1]), exact(c[0], c[1]); got != want {
			t.Errorf("rateMrps(%d, %d) = %d, want %d", c[0], c[1], got, want)
		}
	}
}
