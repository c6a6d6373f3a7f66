package memory_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// A full store stays within MaxBytesPerEntry of heap per entry. The fills
// are the real Evaluate path, one new subject per request, from eight
// policies in turn (one policy alone holds at most half of the store);
// once a policy cannot take an entry its new subjects go to its overflow
// sketch, whose memory (Store.SketchBytes) is not an entry's and is left
// out.
// The heap is read after a collection, so the figure is what the store
// keeps, not the garbage its tables leave when they grow. The sizes include
// one where every table has just doubled (3/8 full) at the end of the fill.
func TestFullStoreHeap(t *testing.T) {
	sizes := []int{100_000, 256 * (3*4096/4 + 1) * 9 / 8}
	if !testing.Short() {
		sizes = append(sizes, memory.DefaultMaxEntries)
	}
	var policies []*limiter.Policy
	for i := range 8 {
		policies = append(policies, limitertest.Policy(t, limiter.PolicySpec{ID: "size-" + string(rune('a'+i)), Algorithm: limiter.TokenBucket,
			Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 1, RefillPeriod: time.Second}}))
	}
	for _, n := range sizes {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := newStore(t, memory.Config{MaxEntries: n, Clock: newClock(t0)})
		ctx := context.Background()
		batch := []limiter.Request{{Cost: 1}}
		out := make([]limiter.Outcome, 1)
		for i := 0; i < n+n/100; i++ {
			// subject(i)'s shard depends on i mod 256: change policy every 256.
			batch[0].Policy, batch[0].Subject = policies[(i>>8)%len(policies)], subject(uint64(i))
			s.Evaluate(ctx, batch, out)
			if out[0].Kind != limiter.Evaluated {
				t.Fatalf("n=%d: request %d: %+v", n, i, out[0])
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := s.Len()
		if held < n*8/9-n/50 || held > n {
			t.Fatalf("n=%d: %d entries held; want about 8/9 of the bound", n, held)
		}
		sketches := s.SketchBytes()
		perEntry := (float64(after.HeapInuse-before.HeapInuse) - float64(sketches)) / float64(held)
		t.Logf("n=%d: %d entries, heap in use %+.1f MiB (%d sketches), %.0f bytes/entry; runtime Sys %+.1f MiB", n, held,
			float64(after.HeapInuse-before.HeapInuse)/(1<<20), s.Sketches(), perEntry, (float64(after.Sys)-float64(before.Sys))/(1<<20))
		if perEntry > memory.MaxBytesPerEntry {
			t.Errorf("n=%d: %.0f bytes/entry, above MaxBytesPerEntry %d", n, perEntry, memory.MaxBytesPerEntry)
		}
		runtime.KeepAlive(s)
	}
}

// A sliding-log entry holds its log beside the table: measured as the heap
// of a store of sliding logs of n hits each minus that of the same store of
// GCRA states (whose entries hold nothing beside the table), per entry, it
// stays within MaxLogBytes(n).
func TestSlidingLogHeap(t *testing.T) {
	const subjects = 50_000
	heap := func(p *limiter.Policy, hits int) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		clock := newClock(t0)
		s := newStore(t, memory.Config{MaxEntries: 4 * subjects, Clock: clock})
		ctx := context.Background()
		out := make([]limiter.Outcome, 1)
		for h := range hits {
			for i := range subjects {
				s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: subject(uint64(i)), Cost: 1}}, out)
				if out[0].Kind != limiter.Evaluated || !out[0].Decision.Allowed {
					t.Fatalf("hit %d of subject %d: %+v", h, i, out[0])
				}
			}
			clock.Advance(time.Millisecond) // a hit per ms: one entry each
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != subjects {
			t.Fatalf("%d entries, want %d", s.Len(), subjects)
		}
		runtime.KeepAlive(s)
		return float64(after.HeapInuse-before.HeapInuse) / subjects
	}
	gcra := limitertest.Policy(t, limiter.PolicySpec{ID: "heap-gcra", Algorithm: limiter.GCRA,
		Params: limiter.GCRAParams{Burst: 1000, Limit: 1000, Period: time.Hour}})
	base := heap(gcra, 1)
	counts := []int{1, 5}
	if !testing.Short() {
		counts = append(counts, 20)
	}
	for _, hits := range counts {
		p := limitertest.Policy(t, limiter.PolicySpec{ID: "heap-log", Algorithm: limiter.SlidingLog,
			Params: limiter.SlidingLogParams{Limit: 1000, Window: time.Hour}})
		extra := heap(p, hits) - base
		t.Logf("sliding log of %d hits: %.0f bytes/entry beside the table (the table: %.0f)", hits, extra, base)
		if extra > float64(memory.MaxLogBytes(hits)) {
			t.Errorf("sliding log of %d hits: %.0f bytes/entry beside the table, above MaxLogBytes %d", hits, extra, memory.MaxLogBytes(hits))
		}
	}
}
