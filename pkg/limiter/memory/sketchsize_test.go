package memory_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// digest is a subject digest as the service makes them (an HMAC): every
// word uniform and independent, unlike subject's, whose last two words are
// 0 (the sketch hashes one word per row).
func digest(i uint64) limiter.SubjectDigest {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], i)
	return sha256.Sum256(b[:])
}

// flood sends one request of cost 1 for each of n new subjects (digest(from)
// onwards) on p, failing on any outcome that is not a decision.
func flood(t *testing.T, s *memory.Store, p *limiter.Policy, from, n uint64) {
	t.Helper()
	ctx := context.Background()
	for i := from; i < from+n; i++ {
		if o := eval1(s, ctx, limiter.Request{Policy: p, Subject: digest(i), Cost: 1}); o.Kind != limiter.Evaluated {
			t.Fatalf("flood subject %d: %+v", i, o)
		}
	}
}

// TestSketchWidthFromPool: with 20,000 entries, rows are at most 16,384
// cells wide (half of the entries, rounded up to a power of two) and the
// pool is its minimum, 4 MiB; each new sketch takes the widest row whose
// memory beyond the minimum is at most half of what the pool has left: 3
// flooded policies get the widest, the next ones narrower, never below the
// minimum. The sketches never take more than MaxSketches minimal sketches
// plus the pool, and give it back once their windows have passed.
func TestSketchWidthFromPool(t *testing.T) {
	const maxEntries = 20_000
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: maxEntries})
	pool := int64(memory.MinSketchPoolBytes)
	rowBytes := int64(4 * 16) // one cell of each of the 4 rows
	want := []int64{16384, 16384, 16384, 8192, 8192, 4096, 4096, 4096, 4096, 2048, 2048}
	var total int64
	for i, w := range want {
		p := limitertest.Policy(t, limiter.PolicySpec{ID: "flooded-" + string(rune('a'+i)), Algorithm: limiter.FixedWindow,
			Params: limiter.FixedWindowParams{Limit: 5, Window: time.Minute}})
		// Enough subjects to fill the policy's share of every shard and
		// spill.
		flood(t, s, p, uint64(i)<<32, 12_000)
		if s.Sketches() != i+1 {
			t.Fatalf("policy %d: %d sketches, want %d", i, s.Sketches(), i+1)
		}
		total += w * rowBytes
		if got := s.SketchBytes(); got != total {
			t.Fatalf("policy %d: sketches take %d bytes, want %d (rows of %d cells for this one)", i, got, total, w)
		}
		if bound := int64(s.Sketches())*memory.MinSketchBytes + pool; total > bound {
			t.Fatalf("policy %d: %d bytes of sketches, above the bound %d", i, total, bound)
		}
	}
	clock.Advance(3 * time.Minute)
	s.SweepExpired()
	if s.Sketches() != 0 || s.SketchBytes() != 0 {
		t.Fatalf("after the windows: %d sketches, %d bytes", s.Sketches(), s.SketchBytes())
	}
	// The pool is whole again: the next flooded policy gets the widest.
	p := fixedPolicy(t, 5, time.Minute)
	flood(t, s, p, 1<<40, 12_000)
	if got := s.SketchBytes(); got != 16384*rowBytes {
		t.Fatalf("after the pool was given back: %d bytes, want rows of 16,384 cells", got)
	}
}

// TestFloodedPolicyStaysOpenToNewcomers: 20,000 entries, 40,000 new
// subjects of one call each on a limit of 5 (about 30,000 of them counted
// by the sketch, rows of 16,384 cells): a brand-new subject of the flooded
// policy is limited, not closed. Each of 100 newcomers gets at least one of
// 7 calls admitted and at most its limit, 4 on average at least.
func TestFloodedPolicyStaysOpenToNewcomers(t *testing.T) {
	s := newStore(t, memory.Config{Clock: newClock(t0), MaxEntries: 20_000})
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "api_key", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 5, Window: time.Hour}})
	flood(t, s, p, 0, 40_000)
	if held := s.Len(); held > 10_500 {
		t.Fatalf("%d entries held; the flood should have spilled", held)
	}
	ctx := context.Background()
	total, least, most := 0, 7, 0
	for u := range uint64(100) {
		admitted := 0
		for range 7 {
			o := eval1(s, ctx, limiter.Request{Policy: p, Subject: digest(1<<40 + u), Cost: 1})
			if o.Kind != limiter.Evaluated || o.Decision.Source != limiter.SourceMemoryOverflow {
				t.Fatalf("newcomer %d: %+v", u, o)
			}
			if o.Decision.Allowed {
				admitted++
			}
		}
		if admitted < 1 || admitted > 5 {
			t.Errorf("newcomer %d: %d of 7 admitted, want 1 to 5", u, admitted)
		}
		total += admitted
		least, most = min(least, admitted), max(most, admitted)
	}
	t.Logf("100 newcomers: %d to %d of 7 admitted, %.2f on average; sketches %d bytes", least, most, float64(total)/100, s.SketchBytes())
	if mean := float64(total) / 100; mean < 4 {
		t.Errorf("newcomers got %.2f of 7 admitted on average, want 4 at least", mean)
	}
}

// TestSketchOverCountBound holds the sketch to its documented error: with
// N units counted in rows of w cells, a subject's estimate exceeds its own
// usage by more than e·N/w for at most 2% of subjects (e^-4 is 1.8%).
// Newcomers are probed with checks, which count nothing: their remaining
// count gives the estimate.
func TestSketchOverCountBound(t *testing.T) {
	const limit = 1_000_000
	for _, units := range []uint64{2048, 8192, 32_768} {
		// 64 entries: a pool of 4 KiB, so the sketch has the minimum width.
		s := newStore(t, memory.Config{Clock: newClock(t0), MaxEntries: 64, Shards: 1})
		p := limitertest.Policy(t, limiter.PolicySpec{ID: "bound", Algorithm: limiter.FixedWindow,
			Params: limiter.FixedWindowParams{Limit: limit, Window: time.Hour}})
		flood(t, s, p, 0, units)
		w := float64(s.SketchBytes()) / (4 * 16)
		bound := math.E * float64(units) / w
		ctx := context.Background()
		const probes = 4000
		over, worst := 0, int64(0)
		for u := range uint64(probes) {
			o := eval1(s, ctx, limiter.Request{Policy: p, Subject: digest(1<<40 + u), Cost: 1, Role: limiter.RoleCheck})
			if o.Kind != limiter.Evaluated || o.Decision.Consumed {
				t.Fatalf("probe %d: %+v", u, o)
			}
			est := limit - 1 - o.Decision.Remaining
			worst = max(worst, est)
			if float64(est) > bound {
				over++
			}
		}
		t.Logf("%d units in rows of %.0f cells: %d of %d estimates above e·N/w = %.1f, the worst %d", units, w, over, probes, bound, worst)
		if over > probes*2/100 {
			t.Errorf("%d units: %d of %d estimates above e·N/w = %.1f, more than 2%%", units, over, probes, bound)
		}
	}
}

// TestSketchNewcomersByLoad: how much of a limit of 5 a brand-new subject
// gets from a sketch of the minimum width (2,048 cells a row) that counted
// 2, 4, 7 and 12 single-unit subjects per cell: 4, 3 and 2 of it on
// average at least up to 7 a cell; at 12 a cell the sketch is saturated,
// under 1 on average (docs/deploy.md states both).
func TestSketchNewcomersByLoad(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		perCell       uint64
		least, atMost float64
	}{{2, 4, 5}, {4, 3, 5}, {7, 2, 5}, {12, 0, 1}} {
		s := newStore(t, memory.Config{Clock: newClock(t0), MaxEntries: 64, Shards: 1}) // rows of the minimum width
		p := limitertest.Policy(t, limiter.PolicySpec{ID: "load", Algorithm: limiter.FixedWindow,
			Params: limiter.FixedWindowParams{Limit: 5, Window: time.Hour}})
		flood(t, s, p, 0, tc.perCell*2048)
		total := 0
		for u := range uint64(200) {
			for range 7 {
				if o := eval1(s, ctx, limiter.Request{Policy: p, Subject: digest(1<<40 + u), Cost: 1}); o.Decision.Allowed {
					total++
				}
			}
		}
		mean := float64(total) / 200
		t.Logf("%d units a cell: a newcomer gets %.2f of 5 on average", tc.perCell, mean)
		if mean < tc.least || mean > tc.atMost {
			t.Errorf("%d units a cell: %.2f of 5 admitted on average, want %.0f to %.0f", tc.perCell, mean, tc.least, tc.atMost)
		}
	}
}
