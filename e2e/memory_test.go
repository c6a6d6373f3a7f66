package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestMemoryStoreDefault: `serve` with no --store and no secret runs on the
// in-memory store and enforces a limit.
func TestMemoryStoreDefault(t *testing.T) {
	r := startReplica(t, "memory", replicaConfig{Rules: rulesDir(t, hourlyRules(3, "user"))})

	got := r.checkAdmits(t, entry{"user", unique("u")}, 3, 5)
	for i, res := range got {
		if res.Limit != 3 {
			t.Errorf("call %d: current_limit %d, want 3", i, res.Limit)
		}
	}
	if h := got[4].Headers; h["Retry-After"] == "" || h["X-RateLimit-Remaining"] != "0" {
		t.Errorf("OVER_LIMIT headers %v: want Retry-After and X-RateLimit-Remaining: 0", h)
	}
	// Another subject has its own limit.
	if res := r.mustCall(t, entry{"user", unique("u")}); !res.ok() {
		t.Errorf("another user: %v, want OK", res)
	}
	// An unknown descriptor is not limited.
	if res := r.mustCall(t, entry{"nothing", "here"}); !res.ok() {
		t.Errorf("unmatched descriptor: %v, want OK", res)
	}

	code, body := r.mustAdmin("/config")
	var doc struct {
		Store string `json:"store"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &doc) != nil || doc.Store != "memory" {
		t.Errorf("/config: %d %s: want store memory", code, body)
	}
	if !r.log.contains("random per-process secret") {
		t.Errorf("no warning about the random HMAC secret in the log")
	}
}

// TestMemoryFloodStaysInItsPolicy: a flood of distinct values on one
// per-value limit of the memory store, far beyond --memory-max-entries,
// leaves every other limit exact for its brand-new users, fail closed and
// fail open alike (neither denied for capacity nor admitted without a
// count), and the flooded limit's new values are still limited, never above
// their limit. Every call gets an answer; the sketch's decisions are
// counted per policy.
func TestMemoryFloodStaysInItsPolicy(t *testing.T) {
	rules := rulesDir(t, `domain: e2e
descriptors:
  - key: flood
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 2, failure_mode: open}
`)
	r := startReplica(t, "flood", replicaConfig{Rules: rules, Args: []string{"--memory-max-entries", "1024"}})

	// The flood: 8 goroutines, 6,000 distinct values, two calls each.
	const workers, perWorker = 8, 750
	var mu sync.Mutex
	okPerValue := map[string]int{}
	var failures []string
	load(workers, perWorker, nil, func(g, i int) {
		v := fmt.Sprintf("f-%d-%d", g, i)
		for range 2 {
			res := r.call(callTimeout, 1, entry{"flood", v})
			mu.Lock()
			switch {
			case res.ok():
				okPerValue[v]++
			case !res.over() && len(failures) < 5:
				failures = append(failures, res.String())
			}
			mu.Unlock()
		}
	})
	if len(failures) > 0 {
		t.Fatalf("flood calls without a decision: %v", failures)
	}
	if len(okPerValue) == 0 {
		t.Fatal("the flood admitted nothing")
	}
	// Brand-new users of the other limits: exact, headers and all.
	for _, key := range []string{"closed", "open"} {
		for u := range 10 {
			user := entry{key, unique("u")}
			for call, wantRemaining := range []string{"1", "0", "0"} {
				res := r.mustCall(t, user)
				if wantOK := call < 2; res.ok() != wantOK || res.Limit != 2 || res.Headers["X-RateLimit-Remaining"] != wantRemaining {
					t.Fatalf("%s user %d call %d after the flood: %v; want ok=%v, limit 2, remaining %s",
						key, u, call, res, wantOK, wantRemaining)
				}
				if call == 2 && res.Headers["Retry-After"] == "" {
					t.Fatalf("%s user %d: OVER_LIMIT without Retry-After: %v", key, u, res)
				}
			}
		}
	}
	// Only the flooded policy's new values were decided by a sketch.
	overflow := r.metricSum("envoy_rls_memory_overflow_decisions_total{")
	if overflow == 0 {
		t.Fatal("envoy_rls_memory_overflow_decisions_total is 0 after the flood: the sketch never decided")
	}
	if n := r.metric("envoy_rls_memory_refused_total"); n != 0 {
		t.Errorf("envoy_rls_memory_refused_total %v after a flood on one policy, want 0", n)
	}
	// The fairness rule is per shard: with 8-entry shards, a third new
	// user of another policy landing in a shard the flood half fills is
	// decided by that policy's sketch (exactly, as the headers above show,
	// unless cells collide). Those are a few of the 60 calls above.
	if got := r.metricSum("envoy_rls_memory_overflow_decisions_total{policy=\"e2e/flood\"}"); overflow-got > 30 {
		t.Errorf("%v of %v overflow decisions were not the flooded policy's", overflow-got, overflow)
	}

	// New values of the flooded limit: limited, never above 3.
	for u := range 20 {
		v := entry{"flood", unique("late")}
		oks := 0
		for range 5 {
			res := r.mustCall(t, v)
			if res.ok() {
				oks++
			} else if !res.over() || res.Headers["Retry-After"] == "" {
				t.Fatalf("late flood value %d: %v", u, res)
			}
		}
		if oks > 3 {
			t.Fatalf("late flood value %d: %d calls admitted, above the limit 3", u, oks)
		}
	}
	for v, n := range okPerValue {
		if n > 3 {
			t.Fatalf("flood value %s: %d calls admitted, above the limit 3", v, n)
		}
	}
}

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

// TestCalendarMonthE2E: a calendar month of Berlin on the real binary
// (memory store) whose clock the test sets: the limit resets exactly at
// midnight on the 1st, Berlin time, and Retry-After and X-RateLimit-Reset
// count to that boundary, in a February of 28 days and across the spring
// clock change.
func TestCalendarMonthE2E(t *testing.T) {
	clock := newTestClock(t, "2026-02-28T23:59:00+01:00")
	rules := rulesDir(t, `domain: e2e
descriptors:
  - key: account
    rate_limit: {unit: month, requests_per_unit: 3, calendar: true, time_zone: Europe/Berlin}
`)
	r := startReplica(t, "calendar", replicaConfig{Rules: rules, Bin: testclockBinary(t), Env: []string{clock.env()}})
	acct := entry{"account", unique("a")}
	check := func(step string, res result, ok bool, remaining, reset string, retry string) {
		t.Helper()
		if res.ok() != ok || res.Limit != 3 {
			t.Fatalf("%s: %v, want ok=%v with limit 3", step, res, ok)
		}
		h := res.Headers
		if h["X-RateLimit-Remaining"] != remaining || h["X-RateLimit-Reset"] != reset || h["Retry-After"] != retry {
			t.Fatalf("%s: headers %v, want remaining %s, reset %s, Retry-After %q", step, h, remaining, reset, retry)
		}
	}
	// The last minute of February in Berlin: 60 s to the boundary.
	check("february 1", r.mustCall(t, acct), true, "2", "60", "")
	check("february 2", r.mustCall(t, acct), true, "1", "60", "")
	check("february 3", r.mustCall(t, acct), true, "0", "60", "")
	check("february over", r.mustCall(t, acct), false, "0", "60", "60")
	// 23:00 UTC on the 28th is March 1st, 00:00 in Berlin: a new month,
	// 31 days long less the hour the clocks skip on March 29th.
	clock.set("2026-02-28T23:00:00Z")
	march := strconv.Itoa(31*24*3600 - 3600)
	check("march 1", r.mustCall(t, acct), true, "2", march, "")
	// A minute before April, local summer time.
	clock.set("2026-03-31T23:59:00+02:00")
	check("march 2", r.mustCall(t, acct), true, "1", "60", "")
	check("march 3", r.mustCall(t, acct), true, "0", "60", "")
	check("march over", r.mustCall(t, acct), false, "0", "60", "60")
	clock.set("2026-04-01T00:00:00+02:00")
	check("april 1", r.mustCall(t, acct), true, "2", strconv.Itoa(30*24*3600), "")
}

// TestMemoryLeaseFloodStaysInItsPolicy: a flood of distinct values on one
// concurrency limit of the memory store takes half of the lease table
// (--memory-max-entries 64: 32 sets); its other values are refused for
// capacity, answered by its failure mode (closed: OVER_LIMIT with
// Retry-After) and counted in envoy_rls_memory_refused_total. Brand-new
// users of a fail-closed and of a fail-open concurrency limit still take
// real leases: OK with the release marker, and OVER_LIMIT at their limit
// (neither denied for capacity nor admitted without a lease).
func TestMemoryLeaseFloodStaysInItsPolicy(t *testing.T) {
	rules := rulesDir(t, `domain: e2e
descriptors:
  - key: flood
    rate_limit: {concurrency: 1, lease_ttl: 1h}
  - key: closed
    rate_limit: {concurrency: 2, lease_ttl: 1h}
  - key: open
    rate_limit: {concurrency: 2, lease_ttl: 1h, failure_mode: open}
`)
	r := startReplica(t, "leaseflood", replicaConfig{Rules: rules, Args: []string{"--memory-max-entries", "64"}})

	// The flood: 4 goroutines, 200 distinct values, one take each.
	const workers, perWorker = 4, 50
	var mu sync.Mutex
	var leased, refused int
	var failures []string
	load(workers, perWorker, nil, func(g, i int) {
		res := take(r, "flood", fmt.Sprintf("f-%d-%d", g, i))
		mu.Lock()
		defer mu.Unlock()
		switch {
		case res.ok() && res.marker() != "":
			leased++
		case res.over() && res.Headers["Retry-After"] == "1":
			refused++
		case len(failures) < 5:
			failures = append(failures, res.String())
		}
	})
	if len(failures) > 0 || leased+refused != workers*perWorker {
		t.Fatalf("flood: %d leased, %d refused, unexpected answers %v", leased, refused, failures)
	}
	if leased != 32 {
		t.Errorf("the flood took %d lease sets, want 32 (half of --memory-max-entries 64)", leased)
	}
	if n := r.metric("envoy_rls_memory_refused_total"); n != float64(refused) {
		t.Errorf("envoy_rls_memory_refused_total %v, want the flood's %d refusals", n, refused)
	}
	// A flood value that holds its lease is still decided exactly.
	if res := take(r, "flood", "f-0-0"); !res.over() || res.Limit != 1 {
		t.Fatalf("a second take of a leased flood value: %v, want OVER_LIMIT at its limit 1", res)
	}

	// Brand-new users of the other limits: two leases each, then their limit.
	for _, key := range []string{"closed", "open"} {
		for u := range 10 {
			user := unique("u")
			var marker string
			for call := range 3 {
				res := take(r, key, user)
				if call == 0 {
					marker = res.marker()
				}
				if call < 2 && (!res.ok() || res.Limit != 2 || res.marker() == "") {
					t.Fatalf("%s user %d take %d after the flood: %v %v; want OK with a lease (limit 2)", key, u, call+1, res, res.Metadata)
				}
				if call == 2 && (!res.over() || res.Limit != 2) {
					t.Fatalf("%s user %d take 3 after the flood: %v; want OVER_LIMIT at its limit 2", key, u, res)
				}
			}
			if res := release(r, key, user, marker); !res.ok() {
				t.Fatalf("%s user %d release: %v", key, u, res)
			}
		}
	}
	if n := r.metric("envoy_rls_memory_refused_total"); n != float64(refused) {
		t.Errorf("envoy_rls_memory_refused_total %v after the other limits' takes, want still %d", n, refused)
	}
}
