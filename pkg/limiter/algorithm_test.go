package limiter_test

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestAlgorithmTable: every algorithm of the table answers by its name, builds
// a policy from a rule's rate, and states its properties.
func TestAlgorithmTable(t *testing.T) {
	if got := limiter.AlgorithmNames(); got != "fixed_window, sliding_window, token_bucket, gcra, sliding_log" {
		t.Fatalf("AlgorithmNames() = %q", got)
	}
	type want struct {
		args        [2]int64
		certainty   limiter.Certainty
		denialsHold bool
		burst       bool
	}
	wants := map[limiter.Algorithm]want{
		limiter.FixedWindow:   {[2]int64{1000, 0}, limiter.Certain, true, false},
		limiter.SlidingWindow: {[2]int64{1000, 0}, limiter.Approximate, false, false},
		// 10 per 1000 ms, reduced to 1 per 100 ms.
		limiter.TokenBucket: {[2]int64{1, 100}, limiter.Certain, true, true},
		// Emission interval 100 ms: one per 100 ms, as the token bucket.
		limiter.GCRA:       {[2]int64{1, 100}, limiter.Certain, true, true},
		limiter.SlidingLog: {[2]int64{1000, 0}, limiter.Certain, true, false},
	}
	algs := limiter.Algorithms()
	if len(algs) != len(wants) {
		t.Fatalf("Algorithms() = %v, want %d", algs, len(wants))
	}
	for _, a := range algs {
		w, ok := wants[a]
		if !ok {
			t.Fatalf("unexpected algorithm %v", a)
		}
		if got, err := limiter.ParseAlgorithm(a.String()); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a, got, err)
		}
		p := limitertest.Policy(t, limiter.PolicySpec{ID: "t", Algorithm: a, Params: a.ParamsFor(limiter.Rate{Limit: 10, Window: time.Second})})
		// The arithmetic: the refill reduced to lowest terms, else the window.
		x, y := p.Refill()
		if x == 0 {
			x, y = p.WindowMillis(), 0
		}
		if p.Algorithm() != a || p.Limit() != 10 || [2]int64{x, y} != w.args {
			t.Errorf("%v: algorithm %v, limit %d, refill or window (%d, %d), want limit 10, %v", a, p.Algorithm(), p.Limit(), x, y, w.args)
		}
		if p.Certainty() != w.certainty || p.DenialsHold() != w.denialsHold || a.TakesBurst() != w.burst {
			t.Errorf("%v: certainty %v, denials hold %v, burst %v; want %+v", a, p.Certainty(), p.DenialsHold(), a.TakesBurst(), w)
		}
	}
	if _, err := limiter.ParseAlgorithm("leaky"); err == nil {
		t.Error("ParseAlgorithm accepted an unknown name")
	}
	if a := limiter.Algorithm(99); a.String() != "unknown" || a.TakesBurst() || a.ParamsFor(limiter.Rate{Limit: 1, Window: time.Second}) != nil {
		t.Error("an unknown algorithm has a name, a burst or parameters")
	}
}

// TestBucketParamsFromRate: the token bucket and GCRA take a rate alike
// (bucketRate): a burst is the capacity; a zero limit holds nothing
// (capacity 0) with a valid refill.
func TestBucketParamsFromRate(t *testing.T) {
	for _, tc := range []struct {
		rate   limiter.Rate
		bucket limiter.TokenBucketParams
		gcra   limiter.GCRAParams
	}{
		{limiter.Rate{Limit: 10, Window: time.Second},
			limiter.TokenBucketParams{Capacity: 10, RefillAmount: 10, RefillPeriod: time.Second},
			limiter.GCRAParams{Burst: 10, Limit: 10, Period: time.Second}},
		{limiter.Rate{Limit: 10, Window: time.Second, Burst: 30},
			limiter.TokenBucketParams{Capacity: 30, RefillAmount: 10, RefillPeriod: time.Second},
			limiter.GCRAParams{Burst: 30, Limit: 10, Period: time.Second}},
		{limiter.Rate{Limit: 0, Window: time.Minute},
			limiter.TokenBucketParams{Capacity: 0, RefillAmount: 1, RefillPeriod: time.Minute},
			limiter.GCRAParams{Burst: 0, Limit: 1, Period: time.Minute}},
	} {
		if got := limiter.TokenBucket.ParamsFor(tc.rate); got != tc.bucket {
			t.Errorf("TokenBucket.ParamsFor(%+v) = %+v, want %+v", tc.rate, got, tc.bucket)
		}
		if got := limiter.GCRA.ParamsFor(tc.rate); got != tc.gcra {
			t.Errorf("GCRA.ParamsFor(%+v) = %+v, want %+v", tc.rate, got, tc.gcra)
		}
	}
}

// TestPolicyShare: the share of a policy (failure_mode local) divides the limit (token bucket: the
// capacity and the refill amount), rounds down, keeps at least 1, keeps a
// zero limit at 0, caps the max cost, and fails closed.
func TestPolicyShare(t *testing.T) {
	fixed := func(limit int64) limiter.PolicySpec {
		return limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailLocal,
			Params: limiter.FixedWindowParams{Limit: limit, Window: time.Minute}}
	}
	for _, tc := range []struct {
		name     string
		spec     limiter.PolicySpec
		replicas int64
		limit    int64
		refill   int64
	}{
		{"10/2", fixed(10), 2, 5, 0},
		{"10/3 rounds down", fixed(10), 3, 3, 0},
		{"1/4 keeps 1", fixed(1), 4, 1, 0},
		{"0 stays 0", fixed(0), 4, 0, 0},
		{"one replica", fixed(10), 1, 10, 0},
		{"sliding", limiter.PolicySpec{ID: "p", Algorithm: limiter.SlidingWindow,
			Params: limiter.SlidingWindowParams{Limit: 7, Window: time.Second}}, 2, 3, 0},
		{"bucket", limiter.PolicySpec{ID: "p", Algorithm: limiter.TokenBucket,
			Params: limiter.TokenBucketParams{Capacity: 20, RefillAmount: 10, RefillPeriod: time.Second}}, 4, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := limiter.NewPolicy(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			q, err := p.Share(tc.replicas)
			if err != nil {
				t.Fatal(err)
			}
			if q.Limit() != tc.limit || q.MaxCost() != tc.limit || q.FailureMode() != limiter.FailClosed ||
				q.ID() != p.ID() || q.Revision() != p.Revision() || q.WindowMillis() != p.WindowMillis() {
				t.Fatalf("share: limit %d max cost %d mode %v id %s, want limit and max cost %d, closed, same id",
					q.Limit(), q.MaxCost(), q.FailureMode(), q.ID(), tc.limit)
			}
			if tb, ok := tc.spec.Params.(limiter.TokenBucketParams); ok {
				// Refill is reduced to lowest terms: compare the rates.
				if amount, period := q.Refill(); amount*tb.RefillPeriod.Milliseconds() != tc.refill*period {
					t.Fatalf("refill %d per %dms, want %d per %v", amount, period, tc.refill, tb.RefillPeriod)
				}
			}
		})
	}
}
