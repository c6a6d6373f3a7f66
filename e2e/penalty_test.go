package e2e_test

import (
	"strconv"
	"testing"
)

// penaltyRules: 3 per hour, and an offence blocks the subject for an hour
// (doubling up to a day while remembered for an hour after a block).
const penaltyRules = `domain: e2e
descriptors:
  - key: login
    rate_limit:
      unit: hour
      requests_per_unit: 3
      penalty: {duration: 1h, max_duration: 24h, decay: 1h}
`

// TestPenaltyBoxAcrossReplicas: two replicas share one Redis. The offence
// on one blocks the subject on both: OVER_LIMIT with the block's Retry-After,
// counted as penalty denials, while another subject is unaffected.
func TestPenaltyBoxAcrossReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 2, penaltyRules, cfg)
	awayFromHourBoundary(t)
	subject := entry{"login", unique("user")}
	for i := range 3 {
		if res := rs[i%2].mustCall(t, subject); !res.ok() {
			t.Fatalf("attempt %d: %v", i+1, res)
		}
	}
	// The offence: the limit denies, and the block (an hour) outlasts the
	// window's rest.
	if res := rs[1].mustCall(t, subject); !res.over() || res.Headers["Retry-After"] != "3600" {
		t.Fatalf("the offence: %v, want OVER_LIMIT with Retry-After 3600", res)
	}
	const penaltySample = `envoy_rls_penalty_denials_total{domain="e2e",policy="e2e/login",result="over_limit"}`
	// replica-0 asks Redis (BLOCKED), then repeats the block from its deny
	// cache; replica-1 never cached the offence (an offence is not
	// repeated from the cache: the store must see the next denial) and asks
	// Redis too.
	for i, r := range []int{0, 0, 0, 1} {
		res := rs[r].mustCall(t, subject)
		ra, err := strconv.Atoi(res.Headers["Retry-After"])
		if !res.over() || err != nil || ra < 3590 || ra > 3600 {
			t.Fatalf("blocked call %d on %s: %v, want OVER_LIMIT with about an hour to wait", i, rs[r].name, res)
		}
	}
	if r0, r1 := rs[0].metric(penaltySample), rs[1].metric(penaltySample); r0 != 3 || r1 != 1 {
		t.Fatalf("penalty denials %v on replica-0 and %v on replica-1, want 3 and 1", r0, r1)
	}
	if res := rs[0].mustCall(t, entry{"login", unique("other")}); !res.ok() {
		t.Fatalf("another subject: %v, want OK", res)
	}
}
