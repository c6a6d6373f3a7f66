package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestCalendarMonth: the memory store with an injected clock counts a
// calendar month of Berlin: the count resets exactly at midnight on the
// 1st, local time, whatever the month's length; a denial's retry and every
// decision's reset point at that boundary; the entry expires after it,
// plus the grace. The overflow sketch rolls over at the same boundary.
func TestCalendarMonth(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "month", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 2, Window: 30 * 24 * time.Hour, Calendar: &limiter.Calendar{Unit: limiter.CalendarMonth, Location: berlin}}})
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// MaxEntries 16 over 16 shards: one entry per shard, so that some of
	// the subjects below spill into the overflow sketch.
	clock := limitertest.NewClock(at("2028-02-01T00:00:00+01:00"))
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 16, Shards: 16})
	ctx := context.Background()
	type step struct {
		now     string
		allowed bool
		reset   string
	}
	steps := []step{
		{"2028-02-01T00:00:00+01:00", true, "2028-03-01T00:00:00+01:00"},
		{"2028-02-29T23:59:59.999+01:00", true, "2028-03-01T00:00:00+01:00"}, // leap day
		{"2028-02-29T23:59:59.999+01:00", false, "2028-03-01T00:00:00+01:00"},
		{"2028-02-29T23:30:00Z", true, "2028-04-01T00:00:00+02:00"}, // already March in Berlin
		{"2028-03-31T21:59:59.999Z", true, "2028-04-01T00:00:00+02:00"},
		{"2028-03-31T21:59:59.999Z", false, "2028-04-01T00:00:00+02:00"},
		{"2028-03-31T22:00:00Z", true, "2028-05-01T00:00:00+02:00"}, // April 1st, 00:00 CEST
	}
	for i, st := range steps {
		clock.Set(at(st.now))
		for subj := range uint64(40) {
			o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(subj), Cost: 1})
			if o.Kind != limiter.Evaluated {
				t.Fatalf("subject %d step %d: %+v", subj, i, o)
			}
			d := o.Decision
			if d.Allowed != st.allowed || !d.ResetAt.Equal(at(st.reset)) {
				t.Fatalf("subject %d step %d at %s: allowed %v reset %s, want %v %s", subj, i, st.now, d.Allowed, d.ResetAt.In(berlin), st.allowed, st.reset)
			}
			if !d.Allowed && d.RetryAfter != at(st.reset).Sub(at(st.now)) {
				t.Fatalf("subject %d step %d: retry after %v, want %v", subj, i, d.RetryAfter, at(st.reset).Sub(at(st.now)))
			}
		}
	}
	if s.Sketches() == 0 {
		t.Fatal("no subject spilled into the overflow sketch")
	}
	// The entries expire at April's end plus the grace, not before.
	held := s.Len()
	if n := s.Sweep(at("2028-05-01T00:00:00+02:00").Add(time.Second - time.Millisecond)); n != 0 || held == 0 {
		t.Fatalf("swept %d of %d entries before the period's end + grace", n, held)
	}
	if n := s.Sweep(at("2028-05-01T00:00:00+02:00").Add(time.Second + time.Millisecond)); n != held || s.Sketches() != 0 {
		t.Fatalf("after the period's end + grace: swept %d of %d, %d sketches left", n, held, s.Sketches())
	}
}
