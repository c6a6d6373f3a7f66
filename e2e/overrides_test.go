package e2e_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// overrideCall sends one descriptor of entries that carries its own limit
// (the reference's RateLimitOverride): perUnit calls per unit.
func (r *replica) overrideCall(perUnit uint32, unit typev3.RateLimitUnit, entries ...entry) result {
	d := &ratelimitv3.RateLimitDescriptor{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: unit}}
	for _, e := range entries {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	return r.send(callTimeout, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
}

// noRequestKeyInMetrics fails the test when a series on /metrics carries
// one of the request-supplied strings in a label.
func noRequestKeyInMetrics(t *testing.T, r *replica, requestStrings ...string) {
	t.Helper()
	for _, line := range r.metricsLines() {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, _, _ := strings.Cut(line, " ")
		_, labels, _ := strings.Cut(series, "{")
		for _, s := range requestStrings {
			if strings.Contains(labels, s) {
				t.Errorf("a metric label carries the request-supplied %q: %s", s, line)
			}
		}
	}
}

// TestOverridesKeepOutOfConfiguredRoom: on a small memory store
// (--memory-max-entries 64), 150 calls that each name a new, unconfigured
// key with a limit of their own (5 a year) are limited like any override,
// but take none of the room of the configured limits: every brand-new
// subject of the configured api_key limit afterwards gets an exact answer
// (OK with 99 left of 100). The overrides hold an eighth of the store and
// of its overflow sketches between them; the others are refused by the
// store, answered by their failure mode (closed: OVER_LIMIT) and counted
// in envoy_rls_memory_override_refused_total, not in
// envoy_rls_memory_refused_total (whose alert means a full store). No metric
// label carries a request-supplied key: the overrides are counted under
// policy="override" (decisions) and policy="e2e:override" (the memory
// store's overflow).
func TestOverridesKeepOutOfConfiguredRoom(t *testing.T) {
	r := startReplica(t, "overrides", replicaConfig{Rules: rulesDir(t, hourlyRules(100, "api_key")),
		Args: []string{"--memory-max-entries", "64"}})

	refused := 0
	for i := range 150 {
		k := entry{fmt.Sprintf("atk_key_%d", i), "x"}
		res := r.overrideCall(5, typev3.RateLimitUnit_YEAR, k)
		switch {
		case res.over():
			refused++
		case !res.ok():
			t.Fatalf("override call %d: %v", i, res)
		}
	}
	// 64 entries: 8 shards of 8, one each for overrides, and 8 sketches
	// (an eighth of 64): 16 admitted, the others refused for capacity.
	if n := r.metric(`envoy_rls_memory_override_refused_total{policy="e2e:override"}`); refused != 134 || n != 134 {
		t.Errorf("%d overrides answered OVER_LIMIT, envoy_rls_memory_override_refused_total %v; want 134 (150 less 8 entries and 8 sketches)", refused, n)
	}
	if n := r.metric("envoy_rls_memory_refused_total"); n != 0 {
		t.Errorf("envoy_rls_memory_refused_total %v: the store refused a configured policy's subject", n)
	}
	// An override keeps being enforced: the same key, five more calls
	// of a limit of 5 in all, the last over.
	k := entry{"atk_key_0", "x"}
	for i := range 5 {
		res := r.overrideCall(5, typev3.RateLimitUnit_YEAR, k)
		if want := i < 4; res.ok() != want || (!want && !res.over()) {
			t.Fatalf("atk_key_0 call %d after the first: %v, want ok=%v", i+2, res, want)
		}
	}

	for u := range 20 {
		user := entry{"api_key", unique("u")}
		res := r.mustCall(t, user)
		if !res.ok() || res.Limit != 100 || res.Headers["X-RateLimit-Remaining"] != "99" {
			t.Fatalf("new api_key subject %d after 150 overrides: %v; want OK, limit 100, 99 left", u, res)
		}
	}
	noRequestKeyInMetrics(t, r, "atk_key")
	if n := r.metricSum(`envoy_rls_decisions_total{domain="e2e",policy="override"`); n < 155 {
		t.Errorf("decisions_total of policy=\"override\": %v, want the 155 override calls", n)
	}
	if n := r.metricSum(`envoy_rls_memory_overflow_decisions_total{policy="e2e:override"}`); n == 0 {
		t.Errorf("no overflow decision counted under policy=\"e2e:override\":\n%s",
			r.metricLines("envoy_rls_memory_overflow_decisions_total"))
	}
}

// TestOverridePolicyCap: with --override-max-policies 3, the first three
// distinct override policies of the domain (domain, unit and keys) are
// limited as Envoy asks, each by its own counter; a fourth is refused with
// OVER_LIMIT and a Retry-After, counted in
// envoy_rls_override_refused_total{domain="e2e"} and consuming nothing of
// the call's other limits; the three keep working; once one of them has
// no state left (its one-second window and the grace have passed, on the
// test clock), a new one takes its place. Configured limits are not
// concerned.
func TestOverridePolicyCap(t *testing.T) {
	clock := newTestClock(t, "2026-03-02T10:00:00Z")
	r := startReplica(t, "cap", replicaConfig{Bin: testclockBinary(t), Env: []string{clock.env()},
		Rules: rulesDir(t, hourlyRules(3, "user")), Args: []string{"--override-max-policies", "3"}})

	// Three policies: an unconfigured key by the second (Envoy Gateway's
	// limit from metadata on a route key), the configured key by the
	// hour, and two keys by the hour.
	shapes := []struct {
		unit    typev3.RateLimitUnit
		entries []entry
	}{
		{typev3.RateLimitUnit_SECOND, []entry{{"route", "r1"}}},
		{typev3.RateLimitUnit_HOUR, []entry{{"user", "alice"}}},
		{typev3.RateLimitUnit_HOUR, []entry{{"tenant", "t1"}, {"plan", "gold"}}},
	}
	for i, s := range shapes {
		for call, wantOK := range []bool{true, true, false} {
			res := r.overrideCall(2, s.unit, s.entries...)
			if res.ok() != wantOK || (!wantOK && !res.over()) || res.Limit != 2 {
				t.Fatalf("override %d call %d: %v; want ok=%v with limit 2", i, call, res, wantOK)
			}
		}
	}
	// Another value of a tracked policy is the same policy: limited.
	if res := r.overrideCall(2, typev3.RateLimitUnit_HOUR, entry{"user", "bob"}); !res.ok() {
		t.Fatalf("another value of a tracked override: %v", res)
	}
	// A fourth policy: refused, with a Retry-After, counted by domain.
	refused := r.overrideCall(2, typev3.RateLimitUnit_MINUTE, entry{"other", "x"})
	if !refused.over() || refused.Headers["Retry-After"] == "" {
		t.Fatalf("a fourth override policy: %v; want OVER_LIMIT with a Retry-After", refused)
	}
	if n := r.metric(`envoy_rls_override_refused_total{domain="e2e"}`); n != 1 {
		t.Fatalf("envoy_rls_override_refused_total{domain=\"e2e\"} %v, want 1:\n%s", n, r.metricLines("envoy_rls_override"))
	}
	if n := r.metric(`envoy_rls_override_policies{domain="e2e"}`); n != 3 {
		t.Errorf("envoy_rls_override_policies{domain=\"e2e\"} %v, want 3", n)
	}
	// Refused beside a configured limit: the call is denied and the
	// configured limit takes nothing (3 left of 3 afterwards).
	carol := unique("carol")
	mixed := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: carol}}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "other", Value: "y"}},
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 9, Unit: typev3.RateLimitUnit_DAY}},
	}}
	if res := r.send(callTimeout, mixed); !res.over() {
		t.Fatalf("a refused override beside a configured limit: %v, want OVER_LIMIT", res)
	}
	if res := r.mustCall(t, entry{"user", carol}); !res.ok() || res.Headers["X-RateLimit-Remaining"] != "2" {
		t.Fatalf("the configured limit after the refused call: %v; want OK with 2 left (nothing taken before)", res)
	}
	// The one-second policy holds no state after its window and the
	// grace: its place goes to a new policy.
	clock.set("2026-03-02T10:00:05Z")
	if res := r.overrideCall(2, typev3.RateLimitUnit_MINUTE, entry{"other", "x"}); !res.ok() || res.Limit != 2 {
		t.Fatalf("a new override policy once one expired: %v, want OK", res)
	}
	// The hourly ones still count where they were.
	if res := r.overrideCall(2, typev3.RateLimitUnit_HOUR, entry{"user", "alice"}); !res.over() {
		t.Fatalf("a tracked hourly override after the swap: %v, want OVER_LIMIT", res)
	}
	noRequestKeyInMetrics(t, r, "route", "tenant", "alice", "other")
}

// TestOverflowSketchAdmitsNewcomers: --memory-max-entries 20000 and a
// flood of 40,000 distinct subjects, one call each, on one limit of 5 an
// hour: about 10,000 of them get entries (the policy's share) and the
// others are counted by the policy's overflow sketch. A brand-new subject
// of the flooded limit is still limited, not closed: of its 7 calls, at
// least one and at most 5 are admitted.
func TestOverflowSketchAdmitsNewcomers(t *testing.T) {
	r := startReplica(t, "sketch", replicaConfig{Rules: rulesDir(t, hourlyRules(5, "api_key")),
		Args: []string{"--memory-max-entries", "20000"}})

	const workers, perWorker = 16, 2500
	var answered, failed atomic.Int64
	stop := make(chan struct{})
	timer := time.AfterFunc(30*time.Second, func() { close(stop) }) // a bound on the load, never reached on a sane machine
	start := time.Now()
	load(workers, perWorker, stop, func(g, i int) {
		res := r.call(callTimeout, 1, entry{"api_key", "f-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)})
		if res.ok() || res.over() {
			answered.Add(1)
		} else {
			failed.Add(1)
		}
	})
	timer.Stop()
	t.Logf("flood: %d calls answered, %d failed, in %v", answered.Load(), failed.Load(), time.Since(start))
	if failed.Load() != 0 || answered.Load() != workers*perWorker {
		t.Fatalf("flood: %d answered, %d failed; want all %d answered", answered.Load(), failed.Load(), workers*perWorker)
	}
	overflow := r.metric(`envoy_rls_memory_overflow_decisions_total{policy="e2e/api_key"}`)
	if overflow < 20_000 {
		t.Fatalf("%v overflow decisions: the flood did not reach the sketch", overflow)
	}
	for n := range 3 {
		user := entry{"api_key", unique("newcomer")}
		oks := 0
		for range 7 {
			res := r.mustCall(t, user)
			switch {
			case res.ok():
				oks++
			case !res.over():
				t.Fatalf("newcomer %d: %v", n, res)
			}
		}
		t.Logf("newcomer %d: %d of 7 admitted", n, oks)
		if oks < 1 || oks > 5 {
			t.Errorf("newcomer %d of the flooded limit: %d of 7 calls admitted; want 1 to 5", n, oks)
		}
	}
}
