package rls

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
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
// answer carries the release marker in its dynamic metadata), the same
// descriptor with the marker as its last entry gives back that take's
// leases (always OK), and the marker's key after a rule that is not a
// concurrency limit is an ordinary entry. Each release below sends the
// marker of the take it names, as Envoy's stream-done rate limit does.
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
			markers := map[int]string{} // step → the marker its answer carried
			for i, s := range []struct {
				name      string
				kv        []string
				release   int    // >= 0: a release with the marker of that step's take
				value     string // else the marker entry's value as written ("": a take)
				code      rlsv3.RateLimitResponse_Code
				remaining []uint32
			}{
				{"release with nothing held: OK, never below zero", []string{"tenant", "t1"}, -1, "release", rlsv3.RateLimitResponse_OK, []uint32{2}},
				{"take", []string{"tenant", "t1"}, -1, "", rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"take", []string{"tenant", "t1"}, -1, "", rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"a third in flight: OVER_LIMIT", []string{"tenant", "t1"}, -1, "", rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"release of the second take", []string{"tenant", "t1"}, 2, "", rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"the same marker again frees nothing more", []string{"tenant", "t1"}, 2, "", rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"take again", []string{"tenant", "t1"}, -1, "", rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"a marker of another subject frees nothing", []string{"tenant", "t2"}, 1, "", rlsv3.RateLimitResponse_OK, nil},
				{"a forged marker frees nothing", []string{"tenant", "t1"}, -1, "s0000000000AAAAAAAA", rlsv3.RateLimitResponse_OK, nil},
				{"still full", []string{"tenant", "t1"}, -1, "", rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"the first take's release", []string{"tenant", "t1"}, 1, "", rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"the value release still gives back the soonest lease", []string{"tenant", "t1"}, -1, "release", rlsv3.RateLimitResponse_OK, []uint32{2}},
				// A descriptor with rate_limits answers with its binding limit.
				{"team: a lease and an hourly request", []string{"team", "a"}, -1, "", rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"team: second in flight denied", []string{"team", "a"}, -1, "", rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"team: the release gives back the lease only", []string{"team", "a"}, 12, "", rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"team: take again", []string{"team", "a"}, -1, "", rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"team: release", []string{"team", "a"}, 15, "", rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"team: the third hourly request: the denied take spent nothing", []string{"team", "a"}, -1, "", rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"team: release", []string{"team", "a"}, 17, "", rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"team: the hour is spent: OVER_LIMIT, the lease given back", []string{"team", "a"}, -1, "", rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"team: release with nothing held", []string{"team", "a"}, -1, "release", rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"the marker entry of an ordinary rule is matched as written", []string{"other", "x", "lease", "release"}, -1, "", rlsv3.RateLimitResponse_OK, []uint32{4}},
				{"a value that is no marker is matched as written (no rule has it)", []string{"tenant", "t1", "lease", "x"}, -1, "", rlsv3.RateLimitResponse_OK, nil},
			} {
				kv := s.kv
				switch {
				case s.release >= 0:
					if markers[s.release] == "" {
						t.Fatalf("step %d (%s): step %d took no lease", i, s.name, s.release)
					}
					kv = append(slices.Clone(kv), "lease", markers[s.release])
				case s.value != "":
					kv = append(slices.Clone(kv), "lease", s.value)
				}
				req := call(kv...)
				resp := h.call(t, req)
				var rem []uint32
				for _, st := range resp.Statuses {
					if st.CurrentLimit != nil {
						rem = append(rem, st.LimitRemaining)
					}
				}
				if resp.OverallCode != s.code || !slices.Equal(rem, s.remaining) {
					t.Fatalf("step %d (%s): %s %v, want %s %v", i, s.name, resp.OverallCode, rem, s.code, s.remaining)
				}
				// A call that took a lease says so in its dynamic metadata,
				// which the stream-done release reads; no other call does.
				tookLease := s.release < 0 && s.value == "" && len(kv) == 2 && s.code == rlsv3.RateLimitResponse_OK
				mark := resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
				if (mark != "") != tookLease || (mark != "" && (len(mark) != markerEntryLen || !isMarker(mark))) {
					t.Fatalf("step %d (%s): dynamic metadata %v, want a lease marker %t", i, s.name, resp.GetDynamicMetadata(), tookLease)
				}
				markers[i] = mark
			}
			// The policy's metrics count the takes, not the releases.
			if got := counterValue(h.metrics(t), `envoy_rls_hits_total{domain="ai",policy="ai/tenant"}`); got != "5" {
				t.Errorf("hits of ai/tenant: %q, want 5 (the takes)", got)
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

// TestLeasesPerCallBound: a call takes at most maxLeasesPerCall leases,
// since its marker must fit in the release's entry value: a take beyond
// them is refused, and the call then takes none.
func TestLeasesPerCallBound(t *testing.T) {
	snap := rulesOf(t, leaseRules)
	h := newHarness(t, func() Rules { return snap }, probeStores(t)["memory"](t), limitertest.NewClock(t0))
	call := func(n int) *rlsv3.RateLimitRequest {
		req := request("ai")
		for i := range n {
			req.Descriptors = append(req.Descriptors, desc("tenant", fmt.Sprintf("t%d", i)))
		}
		return req
	}
	resp := h.call(t, call(maxLeasesPerCall))
	mark := resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(mark) != maxLeasesPerCall*markerEntryLen || len(mark) > MaxValueBytes {
		t.Fatalf("%d takes: %s, marker of %d bytes", maxLeasesPerCall, resp.OverallCode, len(mark))
	}
	resp = h.call(t, call(maxLeasesPerCall+1))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.GetDynamicMetadata().GetFields()["lease"] != nil {
		t.Fatalf("%d takes: %s, metadata %v; want OVER_LIMIT and no lease taken", maxLeasesPerCall+1, resp.OverallCode, resp.GetDynamicMetadata())
	}
	// The refused call took nothing: each tenant holds the one lease of
	// the first call, and has one left.
	if r := resp.Statuses[0]; r.LimitRemaining != 1 {
		t.Fatalf("first tenant after the refused call: %d left, want 1", r.LimitRemaining)
	}
}

func TestReleaseMarker(t *testing.T) {
	for _, c := range []struct {
		in     []descriptors.Entry
		rest   int
		value  string
		marked bool
	}{
		{entries("tenant=t", "lease=release"), 1, "release", true},
		{entries("tenant=t", "lease=s0mxbjt4hoyWGYtFAJ"), 1, "s0mxbjt4hoyWGYtFAJ", true},
		{entries("lease=release"), 1, "", false},
		{entries("tenant=t", "release=lease"), 2, "", false},
		{entries("lease=release", "tenant=t"), 2, "", false},
	} {
		rest, value, marked := splitRelease(c.in)
		if len(rest) != c.rest || value != c.value || marked != c.marked {
			t.Errorf("splitRelease(%v) = %v %q %t", c.in, rest, value, marked)
		}
	}
}

// entries builds descriptor entries from "k=v" strings.
func entries(kv ...string) []descriptors.Entry {
	out := make([]descriptors.Entry, len(kv))
	for i, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out[i] = descriptors.Entry{Key: k, Value: v}
	}
	return out
}
