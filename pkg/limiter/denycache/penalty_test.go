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
