package e2e_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestSeveralLimitsPerDescriptor: "5 per second and 9 per minute" on one
// descriptor (rate_limits), on the memory store of the test-clock build
// with the clock set by the test. The per-second limit binds first; in the
// next second the per-minute one does, with its own current_limit,
// remaining count and Retry-After; the next minute starts afresh.
func TestSeveralLimitsPerDescriptor(t *testing.T) {
	clock := newTestClock(t, "2026-03-02T10:00:10Z")
	r := startReplica(t, "several", replicaConfig{Bin: testclockBinary(t), Env: []string{clock.env()}, Rules: rulesDir(t, `domain: e2e
descriptors:
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: minute, requests_per_unit: 9}
`)})

	const sec, min = rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_MINUTE
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	type step struct {
		code      rlsv3.RateLimitResponse_Code
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
		remaining uint32
		limit     string // X-RateLimit-Limit
		retry     string // Retry-After, "" for none
	}
	const secLimit, minLimit = "5, 5;w=1, 9;w=60", "9, 5;w=1, 9;w=60"
	seconds := []struct {
		at    string
		steps []step
	}{
		{"2026-03-02T10:00:10Z", []step{ // the second's limit binds
			{ok, sec, 4, secLimit, ""}, {ok, sec, 3, secLimit, ""}, {ok, sec, 2, secLimit, ""}, {ok, sec, 1, secLimit, ""},
			{ok, sec, 0, secLimit, ""}, {over, sec, 0, secLimit, "1"},
		}},
		{"2026-03-02T10:00:11Z", []step{ // its window reset: the minute's binds (4 left, then 3 to 0), 49 s to its end
			{ok, min, 3, minLimit, ""}, {ok, min, 2, minLimit, ""}, {ok, min, 1, minLimit, ""}, {ok, min, 0, minLimit, ""},
			{over, min, 0, minLimit, "49"}, {over, min, 0, minLimit, "49"},
		}},
		{"2026-03-02T10:01:00Z", []step{ // a new minute and second: both afresh
			{ok, sec, 4, secLimit, ""},
		}},
	}
	key := unique("key")
	for _, second := range seconds {
		clock.set(second.at)
		for i, want := range second.steps {
			resp := callFull(t, r, "api_key", key)
			st := resp.GetStatuses()[0]
			hd := map[string]string{}
			for _, h := range resp.GetResponseHeadersToAdd() {
				hd[h.GetKey()] = h.GetValue()
			}
			if resp.GetOverallCode() != want.code || st.GetCode() != want.code || st.GetCurrentLimit().GetUnit() != want.unit || st.GetLimitRemaining() != want.remaining {
				t.Fatalf("%s call %d: %v %v remaining %d, want %v %v %d", second.at, i, resp.GetOverallCode(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining(), want.code, want.unit, want.remaining)
			}
			if hd["X-RateLimit-Limit"] != want.limit || hd["X-RateLimit-Remaining"] != strconv.Itoa(int(want.remaining)) || hd["Retry-After"] != want.retry {
				t.Fatalf("%s call %d: headers %v, want limit %q, remaining %d, Retry-After %q", second.at, i, hd, want.limit, want.remaining, want.retry)
			}
		}
	}

	// Each limit has its own policy, listed and counted.
	_, body := r.mustAdmin("/config")
	for _, id := range []string{`"policy_id": "e2e/api_key"`, `"policy_id": "e2e/api_key::1"`, `"limit_count": 2`} {
		if !strings.Contains(body, id) {
			t.Errorf("/config lacks %s:\n%s", id, body)
		}
	}
	if n := r.metric(`envoy_rls_decisions_total{domain="e2e",policy="e2e/api_key::1",result="over_limit"}`); n != 2 {
		t.Errorf("per-minute over_limit decisions %v, want 2", n)
	}
}

// callFull sends one descriptor (key, value) and returns the whole answer.
func callFull(t *testing.T, r *replica, key, value string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
	resp, err := r.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil || len(resp.GetStatuses()) != 1 {
		t.Fatalf("%s: %v %v", r.name, resp, err)
	}
	return resp
}
