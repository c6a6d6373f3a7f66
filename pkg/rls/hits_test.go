package rls

import (
	"math"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const hitsRules = `domain: hits
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 100, charge: always}
`

// TestHitCountersBounded: one descriptor adds at most its policy's max cost
// to the hit counters — hits_total and the observer's Hits, which feed the
// reference's stats, statsd and the top consumers — however large its
// hits_addend (2^63, or 2^53-1, the largest the store would take): the
// limit, twice the limit for charge: always, 2^32-1 for an unlimited rule.
// The audit record keeps the hits_addend as sent.
func TestHitCountersBounded(t *testing.T) {
	audited, observed := &recordingAuditor{}, &recordingLimits{}
	e := newEnv(t, rulesOf(t, hitsRules), func(c *Config) { c.Auditor, c.Observer = audited, observed })
	hits := func(policy string) string {
		return counterValue(e.metrics(t), `envoy_rls_hits_total{domain="hits",policy="`+policy+`"}`)
	}
	for range 5 {
		e.call(t, request("hits", desc("user", "alice")))
	}
	if got := hits("hits/user"); got != "5" {
		t.Fatalf("hits_total after 5 calls: %s", got)
	}
	steps := []struct {
		key, policy string
		hits        uint64
		over        bool
		// counted is what hits_total adds; observed the observer's Hits
		// (no observation for an unlimited rule).
		counted int64
	}{
		{key: "user", policy: "hits/user", hits: 1 << 63, over: true, counted: 5},
		{key: "user", policy: "hits/user", hits: 1<<53 - 1, over: true, counted: 5},
		{key: "user", policy: "hits/user", hits: 6, over: true, counted: 5},
		{key: "free", policy: unlimitedPolicy, hits: 1 << 63, counted: math.MaxUint32},
		{key: "tokens", policy: "hits/tokens", hits: 1 << 63, over: true, counted: 200},
		{key: "tokens", policy: "hits/tokens", hits: 1<<53 - 1, over: true, counted: 200},
	}
	for i, st := range steps {
		before, _ := strconv.ParseFloat(hits(st.policy), 64)
		resp := e.call(t, request("hits", withHits(desc(st.key, "bob"), st.hits)))
		if got := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT; got != st.over {
			t.Fatalf("step %d: %v, want over the limit %v", i, resp.OverallCode, st.over)
		}
		after, _ := strconv.ParseFloat(hits(st.policy), 64)
		if after-before != float64(st.counted) {
			t.Errorf("step %d: hits_addend %d moved hits_total{policy=%q} by %v, want %d", i, st.hits, st.policy, after-before, st.counted)
		}
		if st.key != "free" {
			if n := len(observed.limits); n == 0 || observed.limits[n-1].Hits != st.counted {
				t.Errorf("step %d: observed %+v, want Hits %d", i, observed.limits[max(n-1, 0):], st.counted)
			}
		}
		if st.over {
			audited.mu.Lock()
			d := audited.raw[len(audited.raw)-1]
			audited.mu.Unlock()
			if d.Cost != st.hits {
				t.Errorf("step %d: audited cost %d, want the hits_addend as sent, %d", i, d.Cost, st.hits)
			}
		}
	}
}
