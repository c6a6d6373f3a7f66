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
// sketch, whose fixed size (SketchBytes) is not an entry's and is left out.
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
		sketches := s.Sketches() * memory.SketchBytes
		perEntry := (float64(after.HeapInuse-before.HeapInuse) - float64(sketches)) / float64(held)
		t.Logf("n=%d: %d entries, heap in use %+.1f MiB (%d sketches), %.0f bytes/entry; runtime Sys %+.1f MiB", n, held,
			float64(after.HeapInuse-before.HeapInuse)/(1<<20), s.Sketches(), perEntry, (float64(after.Sys)-float64(before.Sys))/(1<<20))
		if perEntry > memory.MaxBytesPerEntry {
			t.Errorf("n=%d: %.0f bytes/entry, above MaxBytesPerEntry %d", n, perEntry, memory.MaxBytesPerEntry)
		}
		runtime.KeepAlive(s)
	}
}
