package denycache

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestPenaltyBlockCached: a block is repeated locally until it ends, for
// any cost (its wait counted down, 1 ms early: the cache's resolution) and
// for an algorithm whose plain denials are never cached (the
// sliding window); the offence itself (an approximate denial) is not.
func TestPenaltyBlockCached(t *testing.T) {
	e := newEnv(t, 1024)
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: "pen", Algorithm: limiter.SlidingWindow,
		Params:  limiter.SlidingWindowParams{Limit: 2, Window: time.Second},
		Penalty: limiter.Penalty{Duration: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	subj := subject("boxed")
	req := func(cost int64) limiter.Request { return limiter.Request{Policy: p, Subject: subj, Cost: cost} }
	for i := range 2 {
		if o := e.eval(req(1))[0]; !o.Decision.Allowed {
			t.Fatalf("call %d: %+v", i, o)
		}
	}
	if o := e.eval(req(1))[0]; o.Decision.Allowed || o.Decision.Blocked || o.Decision.RetryAfter != 5*time.Second {
		t.Fatalf("the offence: %+v", o.Decision)
	}
	seen := e.back.reqs.Load()
	e.clock.Advance(time.Second)
	if o := e.eval(req(1))[0]; !o.Decision.Blocked || o.Decision.Source != limiter.SourceMemory {
		t.Fatalf("first blocked answer: %+v, want the store's", o.Decision)
	}
	for _, c := range []struct {
		advance time.Duration
		cost    int64
		retry   time.Duration
	}{{0, 1, 4*time.Second - time.Millisecond}, {time.Second, 2, 3*time.Second - time.Millisecond}, {3*time.Second - 2*time.Millisecond, 1, time.Millisecond}} {
		e.clock.Advance(c.advance)
		o := e.eval(req(c.cost))[0]
		if !o.Decision.Blocked || o.Decision.Source != limiter.SourceLocalCache || o.Decision.RetryAfter != c.retry {
			t.Fatalf("cost %d, %v on: %+v, want the cached block with %v left", c.cost, c.advance, o.Decision, c.retry)
		}
	}
	if got := e.back.reqs.Load(); got != seen+1 {
		t.Fatalf("%d requests reached the store during the block, want 1", got-seen)
	}
	// The block's end.
	e.clock.Advance(2 * time.Millisecond)
	if o := e.eval(req(1))[0]; !o.Decision.Allowed || o.Decision.Source != limiter.SourceMemory {
		t.Fatalf("after the block: %+v, want the store's allow", o.Decision)
	}
}

// TestPenaltyOffencesReachTheStore: a policy with a penalty box has only
// its blocks cached, never its offences (the store must record each one),
// and a batch whose cached denial would make it check-only still sends a
// penalty limit as it is, so that its offence is recorded.
func TestPenaltyOffencesReachTheStore(t *testing.T) {
	e := newEnv(t, 1024)
	pen, err := limiter.NewPolicy(limiter.PolicySpec{ID: "pen", Algorithm: limiter.FixedWindow,
		Params:  limiter.FixedWindowParams{Limit: 1, Window: time.Hour},
		Penalty: limiter.Penalty{Duration: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	hot := policy(t, "hot", limiter.FixedWindow, 1, time.Hour)
	subj := subject("mixed")
	e.eval(limiter.Request{Policy: pen, Subject: subj, Cost: 1}, limiter.Request{Policy: hot, Subject: subj, Cost: 1})
	// hot is now full and its next denial cached.
	out := e.eval(limiter.Request{Policy: hot, Subject: subj, Cost: 1})
	if out[0].Decision.Allowed {
		t.Fatalf("hot: %+v", out[0])
	}
	// The cached hot denial blocks the batch; pen (full too) is an
	// offence the store records: 1 s block.
	seen := e.back.reqs.Load()
	out = e.eval(limiter.Request{Policy: hot, Subject: subj, Cost: 1}, limiter.Request{Policy: pen, Subject: subj, Cost: 1})
	if e.back.reqs.Load() != seen+2 || e.back.modes[1] != limiter.RoleOrdinary {
		t.Fatalf("the batch reached the store as %v, want both requests as they are", e.back.modes)
	}
	if d := out[1].Decision; d.Allowed || d.Blocked {
		t.Fatalf("pen: %+v, want the offence", d)
	}
	// The offence's denial (an hour: the window's wait) is not cached: the
	// next request reaches the store and is blocked, the block cached.
	out = e.eval(limiter.Request{Policy: pen, Subject: subj, Cost: 1})
	if d := out[0].Decision; !d.Blocked || d.Source != limiter.SourceMemory {
		t.Fatalf("after the offence: %+v, want the store's block", d)
	}
	// After the block (1 s), the window is still full: a new offence, which
	// the store records (a cache repeating the hour-long denial would not).
	e.clock.Advance(time.Second)
	if d := e.eval(limiter.Request{Policy: pen, Subject: subj, Cost: 1})[0].Decision; d.Blocked || d.Source != limiter.SourceMemory {
		t.Fatalf("after the block: %+v, want a new offence from the store", d)
	}
	if d := e.eval(limiter.Request{Policy: pen, Subject: subj, Cost: 1})[0].Decision; !d.Blocked || d.RetryAfter != time.Second {
		t.Fatalf("second block: %+v, want 1 s (decay 0: no doubling)", d)
	}
}
