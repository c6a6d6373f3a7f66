package rls

import (
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
)

// TestCalendarReset: a calendar month's duration_until_reset,
// X-RateLimit-Reset and Retry-After count to the month's real end in its
// zone, for a limit the store decides and for a zero limit that never
// reaches it.
func TestCalendarReset(t *testing.T) {
	snap := rulesOf(t, `domain: cal
descriptors:
  - key: month
    rate_limit: {unit: month, requests_per_unit: 1, calendar: true, time_zone: Europe/Berlin}
  - key: blocked
    rate_limit: {unit: month, requests_per_unit: 0, calendar: true, time_zone: Europe/Berlin}
`)
	// 23:59 UTC on January 31st is 00:59 on February 1st in Berlin: the
	// month (28 days in 2030) ends on March 1st 00:00 CET.
	now := time.Date(2030, 1, 31, 23, 59, 0, 0, time.UTC)
	end := time.Date(2030, 3, 1, 0, 0, 0, 0, mustLocation(t, "Europe/Berlin"))
	clock := limitertest.NewClock(now)
	h := newHarness(t, func() Rules { return snap }, memStore(t, clock, 100), clock)
	want := end.Sub(now)
	secs := strconv.FormatInt(int64(want/time.Second), 10)
	for i, c := range []struct {
		desc string
		code rlsv3.RateLimitResponse_Code
	}{{"month", rlsv3.RateLimitResponse_OK}, {"month", rlsv3.RateLimitResponse_OVER_LIMIT}, {"blocked", rlsv3.RateLimitResponse_OVER_LIMIT}} {
		resp := h.call(t, request("cal", desc(c.desc, "k")))
		st := resp.Statuses[0]
		if st.Code != c.code || st.DurationUntilReset.AsDuration() != want {
			t.Fatalf("step %d (%s): %v, reset %v, want %v %v", i, c.desc, st.Code, st.DurationUntilReset.AsDuration(), c.code, want)
		}
		headers := map[string]string{}
		for _, hv := range resp.ResponseHeadersToAdd {
			headers[hv.Key] = hv.Value
		}
		if headers[headerReset] != secs {
			t.Fatalf("step %d: %s %q, want %s", i, headerReset, headers[headerReset], secs)
		}
		if c.code == rlsv3.RateLimitResponse_OVER_LIMIT && headers[headerRetryAfter] != secs {
			t.Fatalf("step %d: %s %q, want %s", i, headerRetryAfter, headers[headerRetryAfter], secs)
		}
	}
}

func mustLocation(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestPenaltyBox: the rules of config/examples/11-penalty.yaml on the
// memory store. The offence is answered OVER_LIMIT with the block's wait;
// a blocked call is OVER_LIMIT with the time left in Retry-After and
// duration_until_reset, consumes nothing and is counted as a penalty
// denial; a check-only descriptor reports a block but never causes one; a
// shadow rule records and reports its blocks and answers OK.
func TestPenaltyBox(t *testing.T) {
	clock := limitertest.NewClock(t0)
	snap := rulesAt(t, "../../config/examples/11-penalty.yaml")
	h := newHarness(t, func() Rules { return snap }, memStore(t, clock, 1000), clock)
	login := func() *rlsv3.RateLimitResponse { return h.call(t, request("penalty", desc("login_user", "alice"))) }
	for i := range 5 {
		if resp := login(); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("attempt %d: %v", i+1, resp)
		}
	}
	over := func(what string, resp *rlsv3.RateLimitResponse, retry string, reset time.Duration) {
		t.Helper()
		st := resp.Statuses[0]
		hd := headers(resp)
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
			st.LimitRemaining != 0 || hd[headerRetryAfter] != retry || st.DurationUntilReset.AsDuration() != reset {
			t.Fatalf("%s: %v %v (reset %v), want OVER_LIMIT, Retry-After %s, reset %v", what, resp.OverallCode, hd, st.DurationUntilReset.AsDuration(), retry, reset)
		}
	}
	over("the offence", login(), "600", 10*time.Minute)
	m := h.metrics(t)
	if v := counterValue(m, `envoy_rls_decisions_total{domain="penalty",policy="penalty/login_user",result="over_limit"}`); v != "1" {
		t.Fatalf("over_limit after the offence %q", v)
	}
	if v := counterValue(m, `envoy_rls_penalty_denials_total{domain="penalty",policy="penalty/login_user",result="over_limit"}`); v != "0" {
		t.Fatalf("penalty denials after the offence %q, want 0 (the limit itself denied)", v)
	}
	// Two minutes on the window has room again; the box has not.
	clock.Advance(2 * time.Minute)
	over("blocked", login(), "480", 8*time.Minute)
	over("still blocked", login(), "480", 8*time.Minute)
	m = h.metrics(t)
	if v := counterValue(m, `envoy_rls_penalty_denials_total{domain="penalty",policy="penalty/login_user",result="over_limit"}`); v != "2" {
		t.Fatalf("penalty denials %q, want 2", v)
	}
	if v := counterValue(m, `envoy_rls_decisions_total{domain="penalty",policy="penalty/login_user",result="over_limit"}`); v != "3" {
		t.Fatalf("over_limit %q, want 3 (the offence and two blocked calls)", v)
	}
	// The block over: 5 attempts again (the blocked calls consumed
	// nothing), then a second offence: 20 minutes.
	clock.Advance(8 * time.Minute)
	for i := range 5 {
		if resp := login(); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("after the block, attempt %d: %v", i+1, resp)
		}
	}
	over("the second offence", login(), "1200", 20*time.Minute)

	// A check-only descriptor (hits_addend 0) is never an offence: over the
	// full limit it is the limit's own OVER_LIMIT (its wait within the
	// minute) and the next real attempt is the first offence, not a block;
	// during the block it reports the block, a penalty denial.
	bob := func(hits uint64) *rlsv3.RateLimitResponse {
		return h.call(t, request("penalty", withHits(desc("login_user", "bob"), hits)))
	}
	for i := range 5 {
		if resp := bob(1); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("bob, attempt %d: %v", i+1, resp)
		}
	}
	for i := range 3 {
		resp := bob(0)
		if st := resp.Statuses[0]; resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.DurationUntilReset.AsDuration() > time.Minute {
			t.Fatalf("bob's check %d of the full limit: %v, want OVER_LIMIT with the window's wait", i, resp)
		}
	}
	penaltyDenials := func(want string) {
		t.Helper()
		if v := counterValue(h.metrics(t), `envoy_rls_penalty_denials_total{domain="penalty",policy="penalty/login_user",result="over_limit"}`); v != want {
			t.Fatalf("penalty denials %q, want %s", v, want)
		}
	}
	penaltyDenials("2")
	over("bob's offence after the checks", bob(1), "600", 10*time.Minute)
	penaltyDenials("2")
	over("bob's check during the block", bob(0), "600", 10*time.Minute)
	penaltyDenials("3")

	// Shadow: reported OK, counted as shadow penalty denials.
	scraper := desc("scraper", "bot")
	if resp := h.call(t, request("penalty", withHits(scraper, 1000))); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("shadow fill: %v", resp)
	}
	for i := range 3 {
		if resp := h.call(t, request("penalty", desc("scraper", "bot"))); resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("shadow call %d: %v", i, resp)
		}
	}
	m = h.metrics(t)
	if v := counterValue(m, `envoy_rls_penalty_denials_total{domain="penalty",policy="penalty/scraper",result="shadow_over_limit"}`); v != "2" {
		t.Fatalf("shadow penalty denials %q, want 2 (the offence is the limit's own)", v)
	}
	if v := counterValue(m, `envoy_rls_decisions_total{domain="penalty",policy="penalty/scraper",result="shadow_over_limit"}`); v != "3" {
		t.Fatalf("shadow_over_limit %q, want 3", v)
	}
}
