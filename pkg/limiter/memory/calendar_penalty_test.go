package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestCalendarPenaltyMemory: a calendar day of New York with a penalty
// box on the memory store: an offence just before local midnight blocks
// the subject into the next day (the day's fresh count does not lift the
// block), a probe of the blocked subject answers blocked and records
// nothing, and the subject is admitted once the block ends.
func TestCalendarPenaltyMemory(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "day-pen", Algorithm: limiter.FixedWindow,
		Params:  limiter.FixedWindowParams{Limit: 2, Window: 24 * time.Hour, Calendar: &limiter.Calendar{Unit: limiter.CalendarDay, Location: ny}},
		Penalty: limiter.Penalty{Duration: time.Hour, MaxDuration: 4 * time.Hour, Decay: time.Hour}})
	evening := time.Date(2028, 3, 11, 23, 30, 0, 0, ny) // the night before the spring change
	clock := limitertest.NewClock(evening)
	s := newStore(t, memory.Config{Clock: clock})
	ctx := context.Background()
	r := limiter.Request{Policy: p, Subject: subject(7), Cost: 1}
	decision(t, "first", eval1(s, ctx, r), true, false, 0)
	decision(t, "second", eval1(s, ctx, r), true, false, 0)
	decision(t, "the offence", eval1(s, ctx, r), false, false, time.Hour)
	// 00:10 local: a new day, still in the box until 00:30.
	clock.Advance(40 * time.Minute)
	probe := r
	probe.Role = limiter.RoleProbe
	decision(t, "probe in the new day", eval1(s, ctx, probe), false, true, 20*time.Minute)
	o := eval1(s, ctx, r)
	decision(t, "blocked in the new day", o, false, true, 20*time.Minute)
	if want := time.Date(2028, 3, 12, 0, 30, 0, 0, ny); o.Decision.ResetAt.Before(want) {
		t.Fatalf("reset at %v, before the block ends at %v", o.Decision.ResetAt, want)
	}
	clock.Advance(20 * time.Minute)
	o = eval1(s, ctx, r)
	decision(t, "after the block", o, true, false, 0)
	// The new day (23 hours: the clocks spring forward) counts from zero.
	if want := time.Date(2028, 3, 13, 0, 0, 0, 0, ny); o.Decision.Remaining != 1 || !o.Decision.ResetAt.Equal(want) {
		t.Fatalf("after the block: remaining %d reset %v, want 1 and %v", o.Decision.Remaining, o.Decision.ResetAt, want)
	}
}
