package rls

import (
	"slices"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// leaseRules: two requests of a tenant in flight; a descriptor with
// rate_limits pairs a concurrency limit with a rate limit; and a rule of
// its own on the marker's key, which the marker does not steal.
const leaseRules = `
domain: ai
descriptors:
  - key: tenant
    rate_limit:
      concurrency: 2
      lease_ttl: 1h
  - key: team
    rate_limits:
      - concurrency: 1
        lease_ttl: 1h
      - unit: hour
        requests_per_unit: 3
  - key: other
    descriptors:
      - key: lease
        value: release
        rate_limit:
          unit: hour
          requests_per_unit: 5
`

// TestLeaseRelease: a request-phase descriptor takes a lease (and its
// answer carries the lease mark in its dynamic metadata), the same
// descriptor with the marker entry gives one back (always OK), and the
// marker after a rule that is not a concurrency limit is an ordinary entry.
func TestLeaseRelease(t *testing.T) {
	for name, mk := range probeStores(t) {
		t.Run(name, func(t *testing.T) {
			snap := rulesOf(t, leaseRules)
			h := newHarness(t, func() Rules { return snap }, mk(t), limitertest.NewClock(t0))
			call := func(kv ...string) *rlsv3.RateLimitRequest {
				req := request("ai")
				req.Descriptors = append(req.Descriptors, desc(kv...))
				return req
			}
			takeT, releaseT := call("tenant", "t1"), call("tenant", "t1", "lease", "release")
			takeTeam, releaseTeam := call("team", "a"), call("team", "a", "lease", "release")
			for i, s := range []struct {
				name      string
				req       *rlsv3.RateLimitRequest
				code      rlsv3.RateLimitResponse_Code
				remaining []uint32
			}{
				{"release with nothing held: OK, never below zero", releaseT, rlsv3.RateLimitResponse_OK, []uint32{2}},
				{"take", takeT, rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"take", takeT, rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"a third in flight: OVER_LIMIT", takeT, rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"release", releaseT, rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"take again", takeT, rlsv3.RateLimitResponse_OK, []uint32{0}},
				// A descriptor with rate_limits answers with its binding limit.
				{"team: a lease and an hourly request", takeTeam, rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"team: second in flight denied", takeTeam, rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"team: the release gives back the lease only", releaseTeam, rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"team: take again", takeTeam, rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"team: release", releaseTeam, rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"team: the third hourly request: the denied take spent nothing", takeTeam, rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"team: release", releaseTeam, rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"team: the hour is spent: OVER_LIMIT, the lease given back", takeTeam, rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"team: release with nothing held", releaseTeam, rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"the marker entry of an ordinary rule is matched as written", call("other", "x", "lease", "release"), rlsv3.RateLimitResponse_OK, []uint32{4}},
			} {
				resp := h.call(t, s.req)
				var rem []uint32
				for _, st := range resp.Statuses {
					rem = append(rem, st.LimitRemaining)
				}
				if resp.OverallCode != s.code || !slices.Equal(rem, s.remaining) {
					t.Fatalf("step %d (%s): %s %v, want %s %v", i, s.name, resp.OverallCode, rem, s.code, s.remaining)
				}
				// A call that took a lease says so in its dynamic metadata,
				// which the stream-done release reads; no other call does.
				tookLease := s.req == takeT || s.req == takeTeam
				tookLease = tookLease && s.code == rlsv3.RateLimitResponse_OK
				mark := resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
				if (mark == "release") != tookLease || (mark != "" && mark != "release") {
					t.Fatalf("step %d (%s): dynamic metadata %v, want the lease mark %t", i, s.name, resp.GetDynamicMetadata(), tookLease)
				}
			}
			// The policy's metrics count the four takes, not the releases.
			if got := counterValue(h.metrics(t), `envoy_rls_hits_total{domain="ai",policy="ai/tenant"}`); got != "4" {
				t.Errorf("hits of ai/tenant: %q, want 4 (the takes)", got)
			}
		})
	}
}

// TestLeaseStoreDown: with Redis gone, a take is answered by its rule's
// failure_mode (open: OK, closed: OVER_LIMIT), and neither answer carries
// the lease mark: no lease was taken, so Envoy sends no release for it.
func TestLeaseStoreDown(t *testing.T) {
	srv := redistest.Standalone(t)
	snap := rulesOf(t, `
domain: ai
descriptors:
  - key: open
    rate_limit:
      concurrency: 2
      lease_ttl: 1h
      failure_mode: open
  - key: closed
    rate_limit:
      concurrency: 2
      lease_ttl: 1h
      failure_mode: closed
`)
	h := newHarness(t, func() Rules { return snap }, redisStore(t, redis.Config{Addrs: []string{srv.Addr()}}), limitertest.NewClock(t0))
	srv.Kill()
	for key, want := range map[string]rlsv3.RateLimitResponse_Code{"open": rlsv3.RateLimitResponse_OK, "closed": rlsv3.RateLimitResponse_OVER_LIMIT} {
		req := request("ai")
		req.Descriptors = append(req.Descriptors, desc(key, "t1"))
		resp := h.call(t, req)
		if resp.OverallCode != want || resp.GetDynamicMetadata().GetFields()["lease"] != nil {
			t.Errorf("%s with Redis down: %s, metadata %v; want %s and no lease mark", key, resp.OverallCode, resp.GetDynamicMetadata(), want)
		}
	}
}
