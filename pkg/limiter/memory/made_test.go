package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// overridePolicy is a policy made at request time: one of the group
// edge:override, its ID naming a request key.
func overridePolicy(t testing.TB, key string, limit int64, window time.Duration) *limiter.Policy {
	return limitertest.Policy(t, limiter.PolicySpec{ID: "edge:override:year/" + key, Group: "edge:override",
		Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: limit, Window: window}})
}

// TestMadePoliciesKeepToTheirShare: 150 policies made at request time
// (request-supplied overrides, one subject each) on a store of 64 entries
// hold at most an eighth of it, and an eighth of the sketches; their other
// subjects are refused for capacity (their failure mode answers). The
// configured policy that comes after them finds the store as if they had
// not come: 20 brand-new subjects get the answers they get in a store that
// never saw an override (with 8-entry shards, one made entry leaves the
// policy's half of the free room, 3 a shard, as it was), and its own flood
// still gets a sketch. Overflow decisions are counted under the group,
// never under a made policy's ID.
func TestMadePoliciesKeepToTheirShare(t *testing.T) {
	obs := &counter{}
	s := newStore(t, memory.Config{Clock: newClock(t0), MaxEntries: 64, Observer: obs})
	ctx := context.Background()
	refused, sketched := 0, 0
	for i := range 150 {
		p := overridePolicy(t, fmt.Sprintf("atk_key_%d", i), 5, 365*24*time.Hour)
		o := eval1(s, ctx, limiter.Request{Policy: p, Subject: digest(uint64(i)), Cost: 1})
		switch {
		case o.Kind == limiter.Unavailable && o.Category == limiter.CategoryCapacity:
			refused++
		case o.Kind == limiter.Evaluated && o.Decision.Allowed && o.Decision.Source == limiter.SourceMemoryOverflow:
			sketched++
		case o.Kind != limiter.Evaluated || !o.Decision.Allowed:
			t.Fatalf("override %d: %+v", i, o)
		}
	}
	// 64 entries: 8 shards of 8, an eighth of each (1) for made policies.
	if held := s.Len(); held > 8 {
		t.Fatalf("the made policies hold %d entries, above an eighth of 64", held)
	}
	if s.Sketches() != 8 || sketched != 8 || refused != 150-s.Len()-8 || obs.madeRefused.Load() != int64(refused) {
		t.Fatalf("made policies: %d sketches, %d sketched, %d refused (observer %d), %d entries; want 8 sketches (64/8)",
			s.Sketches(), sketched, refused, obs.refused.Load(), s.Len())
	}
	if n := obs.overflows("edge:override"); n != 8 {
		t.Fatalf("overflow decisions under the group: %d, want 8", n)
	}
	for i := range 150 {
		if n := obs.overflows(fmt.Sprintf("edge:override:year/atk_key_%d", i)); n != 0 {
			t.Fatalf("an overflow decision counted under a made policy's ID: %d", n)
		}
	}

	configured := limitertest.Policy(t, limiter.PolicySpec{ID: "edge/api_key", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}})
	fresh := newStore(t, memory.Config{Clock: newClock(t0), MaxEntries: 64})
	for u := range uint64(20) {
		r := limiter.Request{Policy: configured, Subject: digest(1<<32 + u), Cost: 1}
		o, want := eval1(s, ctx, r), eval1(fresh, ctx, r)
		if d := o.Decision; o.Kind != limiter.Evaluated || !d.Allowed || d.Remaining != 99 || d.Source != want.Decision.Source {
			t.Fatalf("configured subject %d after the overrides: %+v; without them: %+v", u, o, want)
		}
	}
	// The configured policy's own flood still gets a sketch of its own.
	flood(t, s, configured, 1<<33, 200)
	if obs.overflows("edge/api_key") == 0 || s.Sketches() != 9 {
		t.Fatalf("the configured policy's flood: %d overflow decisions, %d sketches", obs.overflows("edge/api_key"), s.Sketches())
	}
}

// TestMadePolicyFairShare: within their share, one made policy's flood
// leaves room for the next made policy, as the fairness rule does for
// configured ones; in a batch, the reservations of earlier requests count.
func TestMadePolicyFairShare(t *testing.T) {
	s := newStore(t, memory.Config{Clock: newClock(t0), MaxEntries: 64, Shards: 1}) // one shard: a share of 8
	ctx := context.Background()
	a := overridePolicy(t, "a", 5, time.Hour)
	b := overridePolicy(t, "b", 5, time.Hour)
	for i := range uint64(20) {
		eval1(s, ctx, limiter.Request{Policy: a, Subject: digest(i), Cost: 1})
	}
	if s.Len() != 4 { // half of the 8 free in the share
		t.Fatalf("one made policy's flood holds %d entries, want 4 (half its share)", s.Len())
	}
	// A batch of three new subjects of b: the share has 4 left, b may
	// take 2 of them (own < free), the third goes to b's sketch.
	batch := []limiter.Request{
		{Policy: b, Subject: digest(100), Cost: 1}, {Policy: b, Subject: digest(101), Cost: 1}, {Policy: b, Subject: digest(102), Cost: 1},
	}
	out := make([]limiter.Outcome, len(batch))
	s.Evaluate(ctx, batch, out)
	for i, want := range []limiter.Source{limiter.SourceMemory, limiter.SourceMemory, limiter.SourceMemoryOverflow} {
		if d := out[i].Decision; out[i].Kind != limiter.Evaluated || !d.Consumed || d.Source != want {
			t.Fatalf("batch request %d: %+v, want consumed from %v", i, out[i], want)
		}
	}
	if s.Len() != 6 {
		t.Fatalf("%d entries after the batch, want 6", s.Len())
	}
	// A configured policy still has the rest of the shard by its own
	// rule (own < free): 29 entries of the 58 free, then its sketch.
	c := fixedPolicy(t, 5, time.Hour)
	for i := range uint64(30) {
		want := limiter.SourceMemory
		if i == 29 {
			want = limiter.SourceMemoryOverflow
		}
		if o := eval1(s, ctx, limiter.Request{Policy: c, Subject: digest(200 + i), Cost: 1}); o.Decision.Source != want {
			t.Fatalf("configured subject %d: %+v, want from %v", i, o, want)
		}
	}
}
