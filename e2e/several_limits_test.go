package e2e_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestSeveralLimitsPerDescriptor: "5 per second and 9 per minute" on one
// descriptor (rate_limits), enforced by two replicas sharing one Redis. The
// per-second limit binds first; once its window resets, the per-minute one
// does, with its own current_limit, remaining count and Retry-After.
func TestSeveralLimitsPerDescriptor(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	cfg.Secret = secretFile(t)
	cfg.Rules = rulesDir(t, `domain: e2e
descriptors:
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: minute, requests_per_unit: 9}
`)
	replicas := []*replica{startReplica(t, "a", cfg), startReplica(t, "b", cfg)}

	const sec, min = rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_MINUTE
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	type step struct {
		code      rlsv3.RateLimitResponse_Code
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
		remaining uint32
		limit     string // X-RateLimit-Limit
	}
	const secLimit, minLimit = "5, 5;w=1, 9;w=60", "9, 5;w=1, 9;w=60"
	seconds := [][]step{
		{ // the second's limit binds
			{ok, sec, 4, secLimit}, {ok, sec, 3, secLimit}, {ok, sec, 2, secLimit}, {ok, sec, 1, secLimit}, {ok, sec, 0, secLimit},
			{over, sec, 0, secLimit},
		},
		{ // its window reset: the minute's binds (4 left, then 3 to 0)
			{ok, min, 3, minLimit}, {ok, min, 2, minLimit}, {ok, min, 1, minLimit}, {ok, min, 0, minLimit},
			{over, min, 0, minLimit}, {over, min, 0, minLimit},
		},
	}

	run := func(key string) bool {
		startSecond()
		for s, steps := range seconds {
			if s > 0 {
				nextSecond()
			}
			began := time.Now().Truncate(time.Second)
			resps := make([]*rlsv3.RateLimitResponse, len(steps))
			for i := range steps {
				resps[i] = callFull(t, replicas[i%2], "api_key", key)
			}
			if time.Now().Truncate(time.Second) != began {
				return false // a slow machine: the calls did not fit in their second
			}
			for i, want := range steps {
				resp := resps[i]
				st := resp.GetStatuses()[0]
				hd := map[string]string{}
				for _, h := range resp.GetResponseHeadersToAdd() {
					hd[h.GetKey()] = h.GetValue()
				}
				if resp.GetOverallCode() != want.code || st.GetCode() != want.code || st.GetCurrentLimit().GetUnit() != want.unit || st.GetLimitRemaining() != want.remaining {
					t.Fatalf("second %d call %d: %v %v remaining %d, want %v %v %d", s, i, resp.GetOverallCode(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining(), want.code, want.unit, want.remaining)
				}
				if hd["X-RateLimit-Limit"] != want.limit || hd["X-RateLimit-Remaining"] != strconv.Itoa(int(want.remaining)) {
					t.Fatalf("second %d call %d: headers %v", s, i, hd)
				}
				retry, has := hd["Retry-After"]
				if has != (want.code == over) {
					t.Fatalf("second %d call %d: Retry-After %q", s, i, retry)
				}
				n, _ := strconv.Atoi(retry)
				if has && (want.unit == sec && n != 1 || want.unit == min && (n < 2 || n > 60)) {
					t.Fatalf("second %d call %d: Retry-After %s for the %v limit", s, i, retry, want.unit)
				}
			}
		}
		return true
	}
	for attempt := 0; !run(unique("key")); attempt++ {
		if attempt == 2 {
			t.Fatal("three attempts: the calls of one second never fitted in it")
		}
	}

	// Each limit has its own policy, listed and counted.
	_, body := replicas[0].mustAdmin("/config")
	for _, id := range []string{`"policy_id": "e2e/api_key"`, `"policy_id": "e2e/api_key::1"`, `"limit_count": 2`} {
		if !strings.Contains(body, id) {
			t.Errorf("/config lacks %s:\n%s", id, body)
		}
	}
	if n := replicas[0].metric(`envoy_rls_decisions_total{domain="e2e",policy="e2e/api_key::1",result="over_limit"}`) + replicas[1].metric(`envoy_rls_decisions_total{domain="e2e",policy="e2e/api_key::1",result="over_limit"}`); n < 2 {
		t.Errorf("per-minute over_limit decisions %v, want at least 2", n)
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

// startSecond waits for the start of a second with at least 10 s left in
// its minute; nextSecond for the start of the next second. Redis decides by
// its own clock, on this machine: a test waits for it.
func startSecond() {
	if now := time.Now(); now.Second() >= 50 {
		waitUntil(now.Truncate(time.Minute).Add(time.Minute))
	}
	nextSecond()
}

func nextSecond() {
	waitUntil(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond))
}

func waitUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		<-time.After(d)
	}
}
