package denycache

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestPenaltyBlockCached: a block is repeated locally until it ends, for
// any cost up to the blocked one (its wait counted down, 1 ms early: the
// cache's resolution) and for an algorithm whose plain denials are never
// cached (the sliding window); the offence itself (an approximate denial)
// is not, nor is a larger cost (the limit may make it wait longer than
// the block).
func TestPenaltyBlockCached(t *testing.T) {
	e := newEnv(t, 1024)
	p := boxed(t, limiter.SlidingWindow, 2, time.Second, 5*time.Second)
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
	seen := e.storeReqs()
	e.clock.Advance(time.Second)
	if o := e.eval(req(1))[0]; !o.Decision.Blocked || o.Decision.Source != limiter.SourceMemory {
		t.Fatalf("first blocked answer: %+v, want the store's", o.Decision)
	}
	if o := e.eval(req(2))[0]; !o.Decision.Blocked || o.Decision.Source != limiter.SourceMemory {
		t.Fatalf("a larger cost: %+v, want the store's block", o.Decision)
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
	if got := e.storeReqs(); got != seen+2 {
		t.Fatalf("%d requests reached the store during the block, want 2", got-seen)
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
	pen := boxed(t, limiter.FixedWindow, 1, time.Hour, time.Second)
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
	seen := e.storeReqs()
	out = e.eval(limiter.Request{Policy: hot, Subject: subj, Cost: 1}, limiter.Request{Policy: pen, Subject: subj, Cost: 1})
	if e.storeReqs() != seen+2 || e.storeModes()[1] != limiter.RoleOrdinary {
		t.Fatalf("the batch reached the store as %v, want both requests as they are", e.storeModes())
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
	d := e.eval(limiter.Request{Policy: pen, Subject: subj, Cost: 1})[0].Decision
	if !d.Blocked || d.BlockedFor != time.Second {
		t.Fatalf("second block: %+v, want 1 s (decay 0: no doubling)", d)
	}
	// Its retry waits for the window, which admits nothing before its end.
	if wait := d.ResetAt.Sub(e.clock.Now()); d.RetryAfter != wait {
		t.Fatalf("second block: retry %v, want the window's end in %v", d.RetryAfter, wait)
	}
	// Cached until the block ends, the window's wait counted down.
	e.clock.Advance(500 * time.Millisecond)
	if c := e.eval(limiter.Request{Policy: pen, Subject: subj, Cost: 1})[0].Decision; c.Source != limiter.SourceLocalCache ||
		!c.Blocked || c.RetryAfter != d.RetryAfter-501*time.Millisecond || c.BlockedFor != 499*time.Millisecond {
		t.Fatalf("cached block: %+v", c)
	}
}

// TestPenaltyProbes: a probe of a penalty limit records no offence, so its
// denial is not cached (an ordinary request after it must reach the store
// and be the offence); a probe answered BLOCKED caches the block, which
// then answers the ordinary requests; and a batch with a cached denial
// sends an unanswered probe of a penalty limit as a check (it records
// nothing either way).
func TestPenaltyProbes(t *testing.T) {
	e := newEnv(t, 1024)
	pen := boxed(t, limiter.FixedWindow, 1, time.Hour, time.Minute)
	subj := subject("probed")
	req := func(role limiter.Role) limiter.Request {
		return limiter.Request{Policy: pen, Subject: subj, Cost: 1, Role: role}
	}
	if d := e.eval(req(limiter.RoleOrdinary))[0].Decision; !d.Allowed || !d.Consumed {
		t.Fatalf("first request: %+v", d)
	}
	for _, role := range []limiter.Role{limiter.RoleProbe, limiter.RoleQuotaProbe, limiter.RoleProbe} {
		if d := e.eval(req(role))[0].Decision; d.Allowed || d.Blocked || d.Source != limiter.SourceMemory || d.RetryAfter <= time.Minute {
			t.Fatalf("%s of the full limit: %+v, want the store's own denial (the window's wait)", role, d)
		}
	}
	if n := e.cache.Len(); n != 0 {
		t.Fatalf("a probe's denial of a penalty limit cached %d entries", n)
	}
	// The ordinary request reaches the store: the offence.
	if d := e.eval(req(limiter.RoleOrdinary))[0].Decision; d.Allowed || d.Blocked || d.Source != limiter.SourceMemory || d.RetryAfter <= time.Minute {
		t.Fatalf("ordinary request after the probes: %+v, want the store's offence", d)
	}
	// A probe now sees the block; it is cached and answers an ordinary
	// request, a probe and a batch beside another limit.
	if d := e.eval(req(limiter.RoleProbe))[0].Decision; !d.Blocked || d.Source != limiter.SourceMemory || d.BlockedFor != time.Minute || d.RetryAfter <= time.Minute {
		t.Fatalf("probe of the boxed subject: %+v, want the store's block", d)
	}
	seen := e.storeReqs()
	for _, role := range []limiter.Role{limiter.RoleOrdinary, limiter.RoleQuotaProbe} {
		if d := e.eval(req(role))[0].Decision; !d.Blocked || d.Source != limiter.SourceLocalCache {
			t.Fatalf("%s after a probe's block: %+v, want the cached block", role, d)
		}
	}
	if got := e.storeReqs(); got != seen {
		t.Fatalf("%d requests reached the store during the cached block", got-seen)
	}
	// A batch whose cached block makes it check-only: another subject's
	// probe of the penalty limit goes to the store as a check.
	other := limiter.Request{Policy: pen, Subject: subject("other"), Cost: 1, Role: limiter.RoleProbe}
	out := e.eval(req(limiter.RoleOrdinary), other)
	if !out[0].Decision.Blocked || out[0].Decision.Source != limiter.SourceLocalCache || len(e.storeModes()) != 1 || e.storeModes()[0] != limiter.RoleCheck {
		t.Fatalf("batch beside a cached block: %+v, store modes %v", out[0].Decision, e.storeModes())
	}
	if d := out[1].Decision; !d.Allowed || d.Consumed {
		t.Fatalf("the other subject's probe: %+v, want allowed, nothing taken", d)
	}
}

// TestPenaltyBlockWaitingForTheLimit: a block whose retry waits for the
// limit itself (its window is full beyond the block) is cached until the
// block ends, for its own cost only: another cost's retry may differ, so
// the store answers it.
func TestPenaltyBlockWaitingForTheLimit(t *testing.T) {
	e := newEnv(t, 1024)
	p := boxed(t, limiter.FixedWindow, 3, time.Hour, 10*time.Second)
	req := func(cost int64) limiter.Request {
		return limiter.Request{Policy: p, Subject: subject("waits"), Cost: cost}
	}
	e.eval(req(3))
	if d := e.eval(req(1))[0].Decision; d.Allowed || d.Blocked {
		t.Fatalf("the offence: %+v", d)
	}
	d := e.eval(req(2))[0].Decision
	if !d.Blocked || d.Source != limiter.SourceMemory || d.BlockedFor != 10*time.Second || d.RetryAfter <= d.BlockedFor {
		t.Fatalf("blocked: %+v, want the store's block of 10 s, its retry the window's", d)
	}
	seen := e.storeReqs()
	if c := e.eval(req(2))[0].Decision; c.Source != limiter.SourceLocalCache || c.RetryAfter != d.RetryAfter-time.Millisecond {
		t.Fatalf("the same cost: %+v, want the cached block", c)
	}
	if c := e.eval(req(1))[0].Decision; !c.Blocked || c.Source != limiter.SourceMemory {
		t.Fatalf("another cost: %+v, want the store's block", c)
	}
	if got := e.storeReqs(); got != seen+1 {
		t.Fatalf("%d requests reached the store, want 1", got-seen)
	}
}
