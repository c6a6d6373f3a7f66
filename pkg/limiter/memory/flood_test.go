package memory_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// algorithmPolicies returns one policy per algorithm with the given ID
// prefix, failure mode and a limit (capacity) of limit per window, and a
// fixed window with a penalty box; for a window of a minute, also a
// calendar window of a minute of Asia/Kolkata's clock, alone and with a
// penalty box.
func algorithmPolicies(t testing.TB, prefix string, mode limiter.FailureMode, limit int64, window time.Duration) []*limiter.Policy {
	pols := []*limiter.Policy{
		limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "-fixed", Algorithm: limiter.FixedWindow, FailureMode: mode,
			Params: limiter.FixedWindowParams{Limit: limit, Window: window}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "-sliding", Algorithm: limiter.SlidingWindow, FailureMode: mode,
			Params: limiter.SlidingWindowParams{Limit: limit, Window: window}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "-bucket", Algorithm: limiter.TokenBucket, FailureMode: mode,
			Params: limiter.TokenBucketParams{Capacity: limit, RefillAmount: limit, RefillPeriod: window}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "-gcra", Algorithm: limiter.GCRA, FailureMode: mode,
			Params: limiter.GCRAParams{Burst: limit, Limit: limit, Period: window}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "-penalty", Algorithm: limiter.FixedWindow, FailureMode: mode,
			Params:  limiter.FixedWindowParams{Limit: limit, Window: window},
			Penalty: limiter.Penalty{Duration: window, MaxDuration: 4 * window, Decay: window}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "-log", Algorithm: limiter.SlidingLog, FailureMode: mode,
			Params: limiter.SlidingLogParams{Limit: limit, Window: window}}),
	}
	if window == time.Minute {
		loc, err := time.LoadLocation("Asia/Kolkata")
		if err != nil {
			t.Fatal(err)
		}
		pols = append(pols, limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "-calendar", Algorithm: limiter.FixedWindow, FailureMode: mode,
			Params: limiter.FixedWindowParams{Limit: limit, Window: window, Calendar: &calendar.Calendar{Unit: calendar.Minute, Location: loc}}}))
		pols = append(pols, limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "-calendar-penalty", Algorithm: limiter.FixedWindow, FailureMode: mode,
			Params:  limiter.FixedWindowParams{Limit: limit, Window: window, Calendar: &calendar.Calendar{Unit: calendar.Minute, Location: loc}},
			Penalty: limiter.Penalty{Duration: window, MaxDuration: 4 * window, Decay: window}}))
	}
	return pols
}

// TestFloodStaysInItsPolicy: a flood of distinct subjects on one policy
// fills only that policy's share of the store. Brand-new subjects of other
// policies, fail closed and fail open, then get exact decisions from
// entries of their own, and the flooded policy's new subjects are still
// limited, by its overflow sketch.
func TestFloodStaysInItsPolicy(t *testing.T) {
	const maxEntries, shards = 4096, 16
	for _, flooded := range algorithmPolicies(t, "flooded", limiter.FailClosed, 3, time.Minute) {
		t.Run(flooded.Algorithm().String(), func(t *testing.T) {
			clock := newClock(t0)
			obs := &counter{}
			s := newStore(t, memory.Config{Clock: clock, MaxEntries: maxEntries, Shards: shards, Observer: obs})
			ctx := context.Background()
			admitted := map[uint64]int64{}
			const flood = 40_000
			for i := range uint64(flood) {
				for range 2 {
					o := eval1(s, ctx, limiter.Request{Policy: flooded, Subject: subject(i), Cost: 2})
					if o.Kind != limiter.Evaluated {
						t.Fatalf("flood subject %d: %+v", i, o)
					}
					if o.Decision.Allowed {
						admitted[i] += 2
					}
				}
			}
			// The flooded policy holds at most half of every shard.
			if n := s.Len(); n > maxEntries/2 || n < maxEntries/2-shards {
				t.Fatalf("the flood holds %d entries; want about half of %d", n, maxEntries)
			}
			for i, n := range admitted {
				if n > 3 {
					t.Fatalf("flood subject %d: %d units admitted, above the limit 3", i, n)
				}
			}
			if obs.overflows(flooded.ID()) == 0 || obs.refused.Load() != 0 {
				t.Fatalf("overflow decisions %d, refused %d", obs.overflows(flooded.ID()), obs.refused.Load())
			}
			// Other policies: exact, as if nothing had happened.
			for _, mode := range []limiter.FailureMode{limiter.FailClosed, limiter.FailOpen} {
				for _, p := range algorithmPolicies(t, "other-"+mode.String(), mode, 2, time.Minute) {
					for u := range uint64(20) {
						sub := subject(1_000_000 + u)
						for call, wantAllowed := range []bool{true, true, false} {
							o := eval1(s, ctx, limiter.Request{Policy: p, Subject: sub, Cost: 1})
							d := o.Decision
							if o.Kind != limiter.Evaluated || d.Allowed != wantAllowed || d.Source != limiter.SourceMemory ||
								d.Certainty != p.Certainty() || d.Remaining != max(0, 1-int64(call)) {
								t.Fatalf("%s user %d call %d after the flood: %+v", p.ID(), u, call, o)
							}
						}
					}
				}
			}
			// New subjects of the flooded policy: limited by its sketch,
			// never above the limit.
			for u := range uint64(50) {
				var got int64
				for range 4 {
					o := eval1(s, ctx, limiter.Request{Policy: flooded, Subject: subject(2_000_000 + u), Cost: 1})
					if o.Kind != limiter.Evaluated || o.Decision.Source != limiter.SourceMemoryOverflow ||
						o.Decision.Certainty != limiter.Approximate {
						t.Fatalf("new flooded subject %d: %+v", u, o)
					}
					if o.Decision.Allowed {
						got++
					}
				}
				if got > 3 {
					t.Fatalf("new flooded subject %d: %d admitted, above the limit 3", u, got)
				}
			}
		})
	}
}

// TestOverflowSketchIsExactWithoutCollisions: a few overflow subjects
// rarely share all their cells, so the sketch gives each its full limit,
// and no more, at one instant; every decision comes from the sketch.
func TestOverflowSketchIsExactWithoutCollisions(t *testing.T) {
	for _, p := range algorithmPolicies(t, "small", limiter.FailClosed, 5, time.Second) {
		t.Run(p.Algorithm().String(), func(t *testing.T) {
			clock := newClock(t0)
			s := newStore(t, memory.Config{Clock: clock, MaxEntries: 2, Shards: 1})
			ctx := context.Background()
			if o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(0), Cost: 1}); o.Decision.Source != limiter.SourceMemory {
				t.Fatalf("first subject: %+v", o)
			}
			for u := uint64(1); u <= 100; u++ {
				var got int64
				for call := range 7 {
					o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(u), Cost: 1})
					d := o.Decision
					if o.Kind != limiter.Evaluated || d.Source != limiter.SourceMemoryOverflow {
						t.Fatalf("subject %d call %d: %+v", u, call, o)
					}
					if d.Allowed {
						got++
						if d.Remaining != 5-got {
							t.Fatalf("subject %d call %d: remaining %d, want %d", u, call, d.Remaining, 5-got)
						}
					} else if d.RetryAfter <= 0 {
						t.Fatalf("subject %d call %d: a denial without a retry: %+v", u, call, o)
					}
				}
				if got != 5 {
					t.Fatalf("subject %d: %d admitted, want the limit 5", u, got)
				}
			}
			if s.Len() != 1 || s.Sketches() != 1 {
				t.Fatalf("Len %d, sketches %d; want 1 and 1", s.Len(), s.Sketches())
			}
			// Once the sketch remembers nothing, Sweep frees it.
			clock.Advance(3 * time.Second)
			s.SweepExpired()
			if s.Sketches() != 0 {
				t.Fatalf("%d sketches after their windows passed", s.Sketches())
			}
		})
	}
}

// TestOverflowNeverAdmitsMoreThanExact: a random flood over time, with
// costs, on a store too small for it. Replayed subject by subject into a
// store with room for all, every request the flooded store admitted is
// admitted again: whether its subject was held exactly, by the sketch, or
// moved between the two, no subject got more than the exact algorithm
// gives it over any window.
func TestOverflowNeverAdmitsMoreThanExact(t *testing.T) {
	for _, p := range algorithmPolicies(t, "replay", limiter.FailClosed, 6, 400*time.Millisecond) {
		t.Run(p.Algorithm().String(), func(t *testing.T) {
			type admit struct {
				at   int64
				cost int64
			}
			rng := rand.New(rand.NewPCG(7, uint64(p.Algorithm())))
			clock := newClock(t0)
			s := newStore(t, memory.Config{Clock: clock, MaxEntries: 64, Shards: 2})
			ctx := context.Background()
			log := map[uint64][]admit{}
			overflow := 0
			for range 30_000 {
				if rng.IntN(50) == 0 {
					clock.Advance(time.Duration(rng.IntN(150)) * time.Millisecond)
				}
				u := uint64(rng.IntN(400))
				cost := 1 + int64(rng.IntN(3))
				o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(u), Cost: cost})
				if o.Kind != limiter.Evaluated {
					t.Fatalf("subject %d: %+v", u, o)
				}
				if o.Decision.Source == limiter.SourceMemoryOverflow {
					overflow++
				}
				if o.Decision.Consumed {
					log[u] = append(log[u], admit{clock.Now().UnixMilli(), cost})
				}
				if rng.IntN(1000) == 0 {
					s.SweepExpired()
				}
			}
			if overflow == 0 {
				t.Fatal("the sketch never decided: widen the flood")
			}
			for u, admits := range log {
				replay := newClock(t0)
				exact := newStore(t, memory.Config{Clock: replay, MaxEntries: 16, Shards: 1})
				for i, a := range admits {
					replay.Set(time.UnixMilli(a.at))
					if o := eval1(exact, ctx, limiter.Request{Policy: p, Subject: subject(u), Cost: a.cost}); !o.Decision.Allowed {
						t.Fatalf("subject %d: admission %d (cost %d at +%dms) exceeds the exact limit: %+v",
							u, i, a.cost, a.at-t0, o)
					}
				}
			}
		})
	}
}

// TestOverflowBatch: in one batch, a new subject of a flooded policy is
// decided by the sketch and a new subject of another policy exactly; a
// denial by the sketch blocks the batch like any denial.
func TestOverflowBatch(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 8, Shards: 1})
	flooded := limitertest.Policy(t, limiter.PolicySpec{ID: "flooded", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 2, Window: time.Minute}})
	other := limitertest.Policy(t, limiter.PolicySpec{ID: "other", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 5, Window: time.Minute}})
	ctx := context.Background()
	for i := range uint64(4) {
		eval1(s, ctx, limiter.Request{Policy: flooded, Subject: subject(i), Cost: 1})
	}
	out := make([]limiter.Outcome, 3)
	batch := []limiter.Request{
		{Policy: other, Subject: subject(100), Cost: 1},
		{Policy: flooded, Subject: subject(101), Cost: 1},
		{Policy: flooded, Subject: subject(101), Cost: 1}, // the same state: sees the first's cost
	}
	s.Evaluate(ctx, batch, out)
	for i, want := range []limiter.Source{limiter.SourceMemory, limiter.SourceMemoryOverflow, limiter.SourceMemoryOverflow} {
		if d := out[i].Decision; out[i].Kind != limiter.Evaluated || !d.Allowed || !d.Consumed || d.Source != want {
			t.Fatalf("request %d: %+v", i, out[i])
		}
	}
	if out[2].Decision.Remaining != 0 {
		t.Fatalf("second request on one sketched subject: remaining %d, want 0", out[2].Decision.Remaining)
	}
	// The sketched subject is spent: its denial blocks the batch, and the
	// other policy's request is not charged.
	s.Evaluate(ctx, batch[:2], out[:2])
	if out[0].Decision.Consumed || out[0].Decision.Remaining != 4 || out[1].Decision.Allowed ||
		out[1].Decision.Source != limiter.SourceMemoryOverflow {
		t.Fatalf("blocked batch: %+v", out[:2])
	}
}

// TestOverflowSketchBound: when MaxSketches policies are in overflow, a new
// subject of one more policy without room is refused (the policy's failure
// mode answers), until a sketch is idle again.
func TestOverflowSketchBound(t *testing.T) {
	clock := newClock(t0)
	obs := &counter{}
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 4, Shards: 1, MaxSketches: 1, Observer: obs})
	a := limitertest.Policy(t, limiter.PolicySpec{ID: "a", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 2, Window: time.Second}})
	b := limitertest.Policy(t, limiter.PolicySpec{ID: "b", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 2, Window: time.Second}})
	ctx := context.Background()
	for i := range uint64(3) { // a: 2 entries, then its sketch
		eval1(s, ctx, limiter.Request{Policy: a, Subject: subject(i), Cost: 1})
	}
	for i := range uint64(2) { // b: 1 entry (half of the free room), then no sketch left
		eval1(s, ctx, limiter.Request{Policy: b, Subject: subject(10 + i), Cost: 1})
	}
	o := eval1(s, ctx, limiter.Request{Policy: b, Subject: subject(20), Cost: 1})
	if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryCapacity || obs.refused.Load() != 2 {
		t.Fatalf("a second policy in overflow with MaxSketches 1: %+v, refused %d", o, obs.refused.Load())
	}
	clock.Advance(2001 * time.Millisecond)
	if o := eval1(s, ctx, limiter.Request{Policy: b, Subject: subject(21), Cost: 1}); !o.Decision.Allowed {
		t.Fatalf("after the windows passed: %+v", o)
	}
}

func TestNewConfigMaxSketches(t *testing.T) {
	if _, err := memory.New(memory.Config{MaxSketches: -1}); err == nil {
		t.Fatal("negative MaxSketches: no error")
	}
}

// TestOverflowConcurrent: goroutines flood one policy with distinct and
// repeated subjects while others use a second policy, the clock standing
// still; no subject of either gets more than its limit, the second policy's
// subjects all get exactly theirs from exact entries, and the race detector
// sees the sketch lock order.
func TestOverflowConcurrent(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 256, Shards: 4})
	flooded := fixedPolicy(t, 3, time.Minute)
	other := limitertest.Policy(t, limiter.PolicySpec{ID: "other", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 2, Window: time.Minute}})
	ctx := context.Background()
	const workers, subjects = 8, 600
	admitted := make([][]int64, workers)
	otherAdmitted := make([]int64, workers)
	var wg sync.WaitGroup
	for g := range workers {
		admitted[g] = make([]int64, subjects)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]limiter.Outcome, 2)
			for i := range subjects * 3 {
				u := uint64(i % subjects)
				if g%2 == 0 {
					s.Evaluate(ctx, []limiter.Request{{Policy: flooded, Subject: subject(u), Cost: 1}}, out[:1])
				} else { // the general path: a batch of two
					s.Evaluate(ctx, []limiter.Request{{Policy: flooded, Subject: subject(u), Cost: 1},
						{Policy: flooded, Subject: subject(u), Cost: 1, Role: limiter.RoleCheck}}, out)
				}
				if out[0].Decision.Consumed {
					admitted[g][u]++
				}
				if i < 2*4 {
					o := eval1(s, ctx, limiter.Request{Policy: other, Subject: subject(10_000 + uint64(g*4+i/2)), Cost: 1})
					if o.Decision.Consumed && o.Decision.Source == limiter.SourceMemory {
						otherAdmitted[g]++
					}
				}
			}
		}()
	}
	wg.Wait()
	for u := range subjects {
		var n int64
		for g := range workers {
			n += admitted[g][u]
		}
		if n > 3 {
			t.Fatalf("flooded subject %d: %d admitted, above the limit 3", u, n)
		}
	}
	for g, n := range otherAdmitted {
		if n != 8 {
			t.Fatalf("worker %d: the other policy admitted %d exactly, want 8 (4 subjects x 2)", g, n)
		}
	}
}

// TestOverflowSketchPolicyChange: under the same policy ID and revision, a
// lowered window limit keeps the sketch's counts (as exact states keep
// theirs); another window restarts them.
func TestOverflowSketchPolicyChange(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 2, Shards: 1})
	ctx := context.Background()
	p5 := fixedPolicy(t, 5, time.Minute)
	p4 := fixedPolicy(t, 4, time.Minute)
	p4h := fixedPolicy(t, 4, time.Hour)
	eval1(s, ctx, limiter.Request{Policy: p5, Subject: subject(0), Cost: 1}) // the policy's one entry
	sub := subject(1)
	for range 3 {
		if o := eval1(s, ctx, limiter.Request{Policy: p5, Subject: sub, Cost: 1}); !o.Decision.Allowed || o.Decision.Source != limiter.SourceMemoryOverflow {
			t.Fatalf("limit 5: %+v", o)
		}
	}
	for call, want := range []bool{true, false} {
		if o := eval1(s, ctx, limiter.Request{Policy: p4, Subject: sub, Cost: 1}); o.Decision.Allowed != want || o.Decision.Source != limiter.SourceMemoryOverflow {
			t.Fatalf("limit lowered to 4, call %d: %+v, want allowed=%v", call, o, want)
		}
	}
	if o := eval1(s, ctx, limiter.Request{Policy: p4h, Subject: sub, Cost: 4}); !o.Decision.Allowed {
		t.Fatalf("another window: %+v, want a fresh count", o)
	}
}

// TestOverflowSketchKeepsCharges: a subject decided by its policy's
// overflow sketch (the table is full) keeps a charge's debt: after a charge
// of 9 on a limit of 5 a second, one more unit is denied (a bucket's or
// GCRA's still one unit's refill later).
func TestOverflowSketchKeepsCharges(t *testing.T) {
	for _, p := range algorithmPolicies(t, "charge", limiter.FailClosed, 5, time.Second) {
		if p.Penalty().On() {
			continue // charge: always takes no penalty box
		}
		spec := p.Spec()
		spec.Charge, spec.MaxCost = limiter.ChargeAlways, 0
		p := limitertest.Policy(t, spec)
		t.Run(p.ID(), func(t *testing.T) {
			clock := newClock(t0)
			s := newStore(t, memory.Config{Clock: clock, MaxEntries: 2, Shards: 1})
			ctx := context.Background()
			eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(0), Cost: 1}) // fills the table
			overflow := 0
			for u := uint64(1); u <= 20; u++ {
				o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(u), Cost: 9})
				if d := o.Decision; o.Kind != limiter.Evaluated || d.Allowed || !d.Consumed {
					t.Fatalf("subject %d: the charge of 9: %+v", u, o)
				}
				if o.Decision.Source == limiter.SourceMemoryOverflow {
					overflow++
				}
				// A bucket or GCRA, one unit's refill later (without its
				// debt it would hold a token again): still denied.
				if algorithm.SketchWindows(p) == 0 {
					clock.Advance(200 * time.Millisecond)
				}
				probe := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(u), Cost: 1, Role: limiter.RoleProbe})
				if probe.Kind != limiter.Evaluated || probe.Decision.Allowed {
					t.Fatalf("subject %d: one unit 200 ms after the charge: %+v", u, probe)
				}
			}
			if overflow == 0 {
				t.Fatal("no charge was decided by the overflow sketch")
			}
		})
	}
}
