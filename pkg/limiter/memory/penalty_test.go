package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// penaltyFixed is 2 per second with a 10 s block doubling up to 40 s while
// the last block ended less than 60 s ago.
func penaltyFixed(t testing.TB, id string) *limiter.Policy {
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params:  limiter.FixedWindowParams{Limit: 2, Window: time.Second},
		Penalty: limiter.Penalty{Duration: 10 * time.Second, MaxDuration: 40 * time.Second, Decay: time.Minute}})
}

// decision asserts o is an evaluated decision with the given verdict.
func decision(t *testing.T, what string, o limiter.Outcome, allowed, blocked bool, retry time.Duration) {
	t.Helper()
	d := o.Decision
	if o.Kind != limiter.Evaluated || d.Allowed != allowed || d.Blocked != blocked || d.RetryAfter != retry {
		t.Fatalf("%s: %v %+v (%v), want allowed %v, blocked %v, retry %v", what, o.Kind, d, o.Err, allowed, blocked, retry)
	}
}

// TestPenaltyBoxMemory: the store keeps a block past the window's own
// expiry, doubles it, and answers blocked requests without consuming.
func TestPenaltyBoxMemory(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock})
	ctx := context.Background()
	p := penaltyFixed(t, "pen")
	r := limiter.Request{Policy: p, Subject: subject(1), Cost: 1}
	decision(t, "first", eval1(s, ctx, r), true, false, 0)
	decision(t, "second", eval1(s, ctx, r), true, false, 0)
	decision(t, "the offence", eval1(s, ctx, r), false, false, 10*time.Second)
	// 5 s later the window's state alone would have expired (1 s + 1 s
	// grace): the block is still there.
	clock.Advance(5 * time.Second)
	decision(t, "blocked", eval1(s, ctx, r), false, true, 5*time.Second)
	if n := s.Len(); n != 1 {
		t.Fatalf("%d entries, want the one in its penalty box", n)
	}
	clock.Advance(5 * time.Second)
	decision(t, "after the block", eval1(s, ctx, r), true, false, 0)
	decision(t, "after the block, second", eval1(s, ctx, r), true, false, 0)
	decision(t, "second offence: doubled", eval1(s, ctx, r), false, false, 20*time.Second)
	clock.Advance(20*time.Second - time.Millisecond)
	decision(t, "blocked to the end", eval1(s, ctx, r), false, true, time.Millisecond)
	// Forgotten 60 s after the block ended.
	clock.Advance(61 * time.Second)
	for range 2 {
		decision(t, "after the decay", eval1(s, ctx, r), true, false, 0)
	}
	decision(t, "a fresh offence", eval1(s, ctx, r), false, false, 10*time.Second)
	// The state goes once the block and its decay are over.
	clock.Advance(10*time.Second + time.Minute + 2*time.Second)
	if n := s.SweepExpired(); n != 1 || s.Len() != 0 {
		t.Fatalf("swept %d, %d left: want the entry gone after its block and decay", n, s.Len())
	}
}

// TestPenaltyBoxMemoryBatch: an offence is recorded even though its batch
// does not commit; the other limit of the batch consumes nothing; a check
// never records; a batch sees a block an earlier request of it recorded.
func TestPenaltyBoxMemoryBatch(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock})
	ctx := context.Background()
	p := penaltyFixed(t, "pen")
	wide := limitertest.Policy(t, limiter.PolicySpec{ID: "wide", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}})
	subj := subject(7)
	for range 2 {
		decision(t, "fill", eval1(s, ctx, limiter.Request{Policy: p, Subject: subj, Cost: 1}), true, false, 0)
	}
	// A check of the full limit: denied, no offence.
	decision(t, "check", eval1(s, ctx, limiter.Request{Policy: p, Subject: subj, Cost: 1, Role: limiter.RoleCheck}), false, false, 1000*time.Millisecond)
	clock.Advance(time.Second)
	decision(t, "no block after a check", eval1(s, ctx, limiter.Request{Policy: p, Subject: subj, Cost: 2}), true, false, 0)
	out := make([]limiter.Outcome, 3)
	s.Evaluate(ctx, []limiter.Request{
		{Policy: wide, Subject: subj, Cost: 1},
		{Policy: p, Subject: subj, Cost: 1}, // the offence
		{Policy: p, Subject: subj, Cost: 1}, // sees the block
	}, out)
	if out[0].Kind != limiter.Evaluated || !out[0].Decision.Allowed || out[0].Decision.Consumed {
		t.Fatalf("the other limit: %+v, want allowed and not consumed", out[0])
	}
	decision(t, "offence in a batch", out[1], false, false, 10*time.Second)
	decision(t, "after the offence in the batch", out[2], false, true, 10*time.Second)
	clock.Advance(3 * time.Second)
	decision(t, "blocked after the batch", eval1(s, ctx, limiter.Request{Policy: p, Subject: subj, Cost: 1}), false, true, 7*time.Second)
	if o := eval1(s, ctx, limiter.Request{Policy: wide, Subject: subj, Cost: 1}); o.Decision.Remaining != 99 {
		t.Fatalf("the other limit: %d left, want 99 (the batch did not commit)", o.Decision.Remaining)
	}
}

// TestPenaltyBoxShadow: a shadow limit records its offences and reports its
// blocks, and they never block the batch.
func TestPenaltyBoxShadow(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock})
	ctx := context.Background()
	spec := penaltyFixed(t, "shadow").Spec()
	spec.Shadow = true
	p := limitertest.Policy(t, spec)
	r := limiter.Request{Policy: p, Subject: subject(3), Cost: 1}
	for range 2 {
		eval1(s, ctx, r)
	}
	decision(t, "shadow offence", eval1(s, ctx, r), false, false, 10*time.Second)
	clock.Advance(2 * time.Second)
	o := eval1(s, ctx, r)
	decision(t, "shadow block", o, false, true, 8*time.Second)
	if o.Decision.Consumed {
		t.Fatal("a blocked shadow request consumed")
	}
}
