package rls

import (
	"fmt"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
)

// TestChargeAboveCeiling: a charge larger than twice the limit is recorded
// as twice the limit, not refused unrecorded as a cost above the max cost
// is: the check (hits_addend 0) after it is denied; on both stores.
func TestChargeAboveCeiling(t *testing.T) {
	const rules = `domain: budget
descriptors:
  - key: tenant
    rate_limit: {unit: year, requests_per_unit: 1000, charge: always}
`
	for name, mk := range probeStores(t) {
		t.Run(name, func(t *testing.T) {
			snap := rulesOf(t, rules)
			h := newHarness(t, func() Rules { return snap }, mk(t), limitertest.NewClock(t0))
			tenant := fmt.Sprintf("acme-%s", name)
			call := func(hits uint64) *rlsv3.RateLimitResponse {
				return h.call(t, request("budget", withHits(desc("tenant", tenant), hits)))
			}
			if r := call(0); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1000 {
				t.Fatalf("first check: %v", r)
			}
			if r := call(5000); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("a charge of 5000: %v", r)
			}
			if r := call(0); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("check after the charge: %v", r)
			}
		})
	}
}
