package rls

import (
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// reserveRules: a tenant's budget of 1,000 tokens an hour that requests
// reserve (their hits_addend) and settle; a key reserving a fixed 300
// whatever the hits; and a second budget the markers of the first must not
// settle.
const reserveRules = `
domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: {ttl: 10m}}
  - key: fixed
    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: {ttl: 10m, estimate: 300}}
  - key: other
    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: {ttl: 10m}}
`

// reserveStores are the stores that hold reservations.
func reserveStores() map[string]func(t *testing.T) limiter.Store {
	return map[string]func(t *testing.T) limiter.Store{
		"memory": func(t *testing.T) limiter.Store { return memStore(t, limitertest.NewClock(t0), 1000) },
	}
}

// TestReserveSettle: a request-phase call reserves its hits_addend (or the
// rule's estimate) and its answer carries the marker of that reservation;
// the stream-done call with the marker settles it at the usage its
// hits_addend reports, once. Forged, altered, replayed and misdirected
// markers settle nothing; a settle without a marker is a plain charge.
func TestReserveSettle(t *testing.T) {
	for name, mk := range reserveStores() {
		t.Run(name, func(t *testing.T) {
			snap := rulesOf(t, reserveRules)
			h := newHarness(t, func() Rules { return snap }, mk(t), limitertest.NewClock(t0))
			call := func(hits uint64, kv ...string) *rlsv3.RateLimitResponse {
				req := request("ai", withHits(desc(kv...), hits))
				return h.call(t, req)
			}
			want := func(step string, resp *rlsv3.RateLimitResponse, code rlsv3.RateLimitResponse_Code, remaining uint32) {
				t.Helper()
				if resp.OverallCode != code || len(resp.Statuses) != 1 || resp.Statuses[0].LimitRemaining != remaining {
					t.Fatalf("%s: %s %v, want %s remaining %d", step, resp.OverallCode, resp.Statuses, code, remaining)
				}
			}
			marker := func(resp *rlsv3.RateLimitResponse) string {
				return resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
			}

			r1 := call(400, "tenant", "a")
			want("reserve 400", r1, rlsv3.RateLimitResponse_OK, 600)
			m1 := marker(r1)
			if len(m1) != markerEntryLen || m1[0] != markerStore {
				t.Fatalf("reserve: marker %q, want one store entry", m1)
			}
			r2 := call(500, "tenant", "a")
			want("reserve 500: the live reservations count", r2, rlsv3.RateLimitResponse_OK, 100)
			m2 := marker(r2)
			want("a third reserve does not fit", call(200, "tenant", "a"), rlsv3.RateLimitResponse_OVER_LIMIT, 100)
			if m := marker(call(200, "tenant", "a")); m != "" {
				t.Fatalf("a denied reserve carries marker %q", m)
			}

			// The first request used 100 of its 400: 300 come back.
			want("settle 100 of 400", call(100, "tenant", "a", "lease", m1), rlsv3.RateLimitResponse_OK, 400)
			for _, bad := range []struct{ name, value string }{
				{"the same marker again", m1},
				{"a forged tag", m2[:len(m2)-2] + flip(m2[len(m2)-2:])},
				{"an altered expiry", m2[:1] + flip(m2[1:2]) + m2[2:]},
				{"a local holder for a store reservation", string(markerLocal) + m2[1:]},
			} {
				// Answered OK (a settle never blocks), nothing changes.
				if resp := call(0, "tenant", "a", "lease", bad.value); resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatalf("settle with %s: %s", bad.name, resp.OverallCode)
				}
				want("after a settle with "+bad.name, call(0, "tenant", "a"), rlsv3.RateLimitResponse_OK, 400)
			}
			for _, kv := range [][]string{{"tenant", "b"}, {"other", "a"}} { // another subject, another rule
				if resp := call(0, kv[0], kv[1], "lease", m2); resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatalf("%s=%s settled with another's marker: %s", kv[0], kv[1], resp.OverallCode)
				}
				want(kv[0]+"="+kv[1]+" after another's marker", call(0, kv[0], kv[1]), rlsv3.RateLimitResponse_OK, 1000)
			}
			want("the state is as it was", call(0, "tenant", "a"), rlsv3.RateLimitResponse_OK, 400)

			// The second used 700 of its 500: 200 more are charged.
			want("settle 700 of 500", call(700, "tenant", "a", "lease", m2), rlsv3.RateLimitResponse_OK, 200)
			want("no marker: a plain charge", call(50, "tenant", "a", "lease", "release"), rlsv3.RateLimitResponse_OK, 150)

			// A rule's estimate holds whatever the request's hits.
			r3 := call(1, "fixed", "a")
			want("reserve the estimate", r3, rlsv3.RateLimitResponse_OK, 700)
			want("settle 0 of 300", call(0, "fixed", "a", "lease", marker(r3)), rlsv3.RateLimitResponse_OK, 1000)
		})
	}
}

// flip changes the first character of s to another one of the same
// alphabet.
func flip(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	if s[0] >= '0' && s[0] <= '9' {
		b[0] = '0' + (s[0]-'0'+1)%10
	}
	return string(b)
}

// TestReserveMarkerNamesEveryReservation: a call reserving on two budgets
// carries one marker entry each, and its settle settles both.
func TestReserveMarkerNamesEveryReservation(t *testing.T) {
	snap := rulesOf(t, reserveRules)
	h := newHarness(t, func() Rules { return snap }, memStore(t, limitertest.NewClock(t0), 1000), limitertest.NewClock(t0))
	resp := h.call(t, request("ai", withHits(desc("tenant", "a"), 100), withHits(desc("other", "a"), 200)))
	m := resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(m) != 2*markerEntryLen {
		t.Fatalf("%s, marker %q: want OK and two entries", resp.OverallCode, m)
	}
	settle := h.call(t, request("ai", withHits(desc("tenant", "a", "lease", m), 0), withHits(desc("other", "a", "lease", m), 0)))
	var rem []uint32
	for _, st := range settle.Statuses {
		rem = append(rem, st.LimitRemaining)
	}
	if !slices.Equal(rem, []uint32{1000, 1000}) {
		t.Fatalf("after settling both at 0: remaining %v, want both budgets whole", rem)
	}
}

// TestReserveMetrics: reservations_total counts committed reserves,
// settles naming a reservation, settles naming none and reservations that
// expired unsettled (when a later reserve of the subject drops them), by
// policy ID;
// reservation_units_total the units reserved and the usage settled. A
// denied reserve counts nothing, and a policy without reservations has no
// such series.
func TestReserveMetrics(t *testing.T) {
	snap := rulesOf(t, reserveRules+`
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000}
`)
	clock := limitertest.NewClock(t0)
	h := newHarness(t, func() Rules { return snap }, memStore(t, clock, 1000), clock)
	call := func(hits uint64, kv ...string) string {
		resp := h.call(t, request("ai", withHits(desc(kv...), hits)))
		return resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
	}
	m1 := call(400, "tenant", "a")
	m2 := call(500, "tenant", "a")
	call(200, "tenant", "a")                                               // denied: no reservation
	call(100, "tenant", "a", "lease", m1)                                  // settled, 100 used
	call(100, "tenant", "a", "lease", m2[:len(m2)-2]+flip(m2[len(m2)-2:])) // a forged tag: unnamed
	call(50, "tenant", "a", "lease", "release")                            // a plain charge: unnamed
	call(700, "tenant", "a", "lease", m2)                                  // settled, 700 used
	call(1, "fixed", "a")                                                  // reserves the estimate, 300
	call(3, "plain", "a")                                                  // no reservation
	call(3, "plain", "a", "lease", "release")                              // not a reserving limit
	clock.Advance(11 * time.Minute)                                        // the fixed reservation expires
	call(1, "fixed", "a")                                                  // reserves 300, drops the expired one

	got := h.metrics(t)
	for series, want := range map[string]string{
		`envoy_rls_reservations_total{domain="ai",event="reserved",policy="ai/tenant"}`:     "2",
		`envoy_rls_reservations_total{domain="ai",event="settled",policy="ai/tenant"}`:      "2",
		`envoy_rls_reservations_total{domain="ai",event="unnamed",policy="ai/tenant"}`:      "2",
		`envoy_rls_reservation_units_total{domain="ai",kind="reserved",policy="ai/tenant"}`: "900",
		`envoy_rls_reservation_units_total{domain="ai",kind="used",policy="ai/tenant"}`:     "800",
		`envoy_rls_reservations_total{domain="ai",event="reserved",policy="ai/fixed"}`:      "2",
		`envoy_rls_reservations_total{domain="ai",event="expired",policy="ai/fixed"}`:       "1",
		`envoy_rls_reservations_total{domain="ai",event="expired",policy="ai/tenant"}`:      "0",
		`envoy_rls_reservation_units_total{domain="ai",kind="reserved",policy="ai/fixed"}`:  "600",
		`envoy_rls_reservation_units_total{domain="ai",kind="used",policy="ai/fixed"}`:      "0",
	} {
		if v := counterValue(got, series); v != want {
			t.Errorf("%s = %q, want %s", series, v, want)
		}
	}
	for _, p := range []string{"ai/plain", "ai/other"} {
		if strings.Contains(got, `envoy_rls_reservations_total{domain="ai",event="reserved",policy="`+p+`"}`) {
			t.Errorf("policy %s has reservation series", p)
		}
	}
}

// reserveObserver keeps the observations of reserves and settles, as
// text.
type reserveObserver struct{ limits lines }

func (r *reserveObserver) ObserveLimit(o LimitObservation) {
	r.limits.addf("%s hits=%d over=%v reserved=%d settled=%v used=%d", o.Rule.Policy.ID(), o.Hits, o.Over, o.Reserved, o.Settled, o.Used)
}

func (*reserveObserver) ObserveCall(CallObservation) {}

// TestReserveObserved: the observer hears a committed reserve with the
// units it holds, and a settle naming a reservation with the usage it
// reports (no hits: it is no decision); a denied reserve holds nothing,
// and a settle naming none, or a plain charge, is not heard.
func TestReserveObserved(t *testing.T) {
	snap := rulesOf(t, reserveRules)
	rec := &reserveObserver{}
	h := newHarness(t, func() Rules { return snap }, memStore(t, limitertest.NewClock(t0), 1000), limitertest.NewClock(t0),
		func(c *Config) { c.Observer = rec })
	call := func(hits uint64, kv ...string) string {
		resp := h.call(t, request("ai", withHits(desc(kv...), hits)))
		return resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
	}
	m1 := call(700, "tenant", "a")
	call(400, "tenant", "a")
	call(650, "tenant", "a", "lease", m1)
	call(650, "tenant", "a", "lease", m1[:len(m1)-2]+flip(m1[len(m1)-2:]))
	call(20, "tenant", "a", "lease", "release")
	call(1, "fixed", "a")
	want := []string{
		"ai/tenant hits=700 over=false reserved=700 settled=false used=0",
		"ai/tenant hits=400 over=true reserved=0 settled=false used=0",
		"ai/tenant hits=0 over=false reserved=0 settled=true used=650",
		"ai/fixed hits=300 over=false reserved=300 settled=false used=0",
	}
	if got := rec.limits.take(); !slices.Equal(got, want) {
		t.Fatalf("observations\n got %q\nwant %q", got, want)
	}
}

// TestReserveFailedOpen: a reserve that the store failed and the rule's
// failure_mode open let through holds no reservation, but its answer still
// carries a marker entry (markerCharge), so that the stream-done settle
// charges the usage once the store answers: the usage is not lost. The
// entry is bound to the limit and subject like any other.
func TestReserveFailedOpen(t *testing.T) {
	const rules = `
domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: {ttl: 10m}, failure_mode: open}
`
	snap := rulesOf(t, rules)
	d := limitertest.NewDouble(t, memStore(t, limitertest.NewClock(t0), 1000), nil)
	h := newHarness(t, func() Rules { return snap }, d, limitertest.NewClock(t0))
	call := func(hits uint64, kv ...string) *rlsv3.RateLimitResponse {
		return h.call(t, request("ai", withHits(desc(kv...), hits)))
	}
	d.Set(limitertest.Fault{Kind: limiter.Unavailable})
	resp := call(400, "tenant", "a")
	m := resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(m) != markerEntryLen || m[0] != markerCharge {
		t.Fatalf("reserve failed open: %s, marker %q: want OK and a charge entry", resp.OverallCode, m)
	}
	d.Set(limitertest.Fault{})
	if resp := call(0, "tenant", "b", "lease", m); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("another subject's settle: %s", resp.OverallCode)
	}
	if resp := call(0, "tenant", "b"); resp.Statuses[0].LimitRemaining != 1000 {
		t.Fatalf("another subject settled with a's charge entry: remaining %d", resp.Statuses[0].LimitRemaining)
	}
	if resp := call(300, "tenant", "a", "lease", m); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("settle: %s", resp.OverallCode)
	}
	if resp := call(0, "tenant", "a"); resp.Statuses[0].LimitRemaining != 700 {
		t.Fatalf("after the settle of 300: remaining %d, want 700 (the usage charged)", resp.Statuses[0].LimitRemaining)
	}
}
