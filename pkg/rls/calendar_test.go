package rls

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestCalendarReset: a calendar month's duration_until_reset,
// X-RateLimit-Reset and Retry-After count to the month's real end in its
// zone, for a limit the store decides and for a zero limit that never
// reaches it.
func TestCalendarReset(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "calendar.yaml")
	writeRules(t, path, `domain: cal
descriptors:
  - key: month
    rate_limit: {unit: month, requests_per_unit: 1, calendar: true, time_zone: Europe/Berlin}
  - key: blocked
    rate_limit: {unit: month, requests_per_unit: 0, calendar: true, time_zone: Europe/Berlin}
`)
	snap, err := descriptors.Load(path, descriptors.Options{Secret: []byte("0123456789abcdef-test-secret")})
	if err != nil {
		t.Fatal(err)
	}
	// 23:59 UTC on January 31st is 00:59 on February 1st in Berlin: the
	// month (28 days in 2030) ends on March 1st 00:00 CET.
	now := time.Date(2030, 1, 31, 23, 59, 0, 0, time.UTC)
	end := time.Date(2030, 3, 1, 0, 0, 0, 0, mustLocation(t, "Europe/Berlin"))
	clock := limitertest.NewClock(now)
	mem, err := memory.New(memory.Config{Clock: clock, MaxEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func() Rules { return snap }, mem, clock)
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
		if headers[HeaderReset] != secs {
			t.Fatalf("step %d: %s %q, want %s", i, HeaderReset, headers[HeaderReset], secs)
		}
		if c.code == rlsv3.RateLimitResponse_OVER_LIMIT && headers[HeaderRetryAfter] != secs {
			t.Fatalf("step %d: %s %q, want %s", i, HeaderRetryAfter, headers[HeaderRetryAfter], secs)
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

func writeRules(t *testing.T, path, rules string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
}
