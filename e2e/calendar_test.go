package e2e_test

import (
	"strconv"
	"testing"
)

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
