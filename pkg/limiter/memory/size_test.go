package memory_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// A full store stays within MaxBytesPerEntry of heap per entry. The fills
// are the real Evaluate path, one new subject per request, up to the bound;
// the heap is read after a collection, so the figure is what the store
// keeps, not the garbage its tables leave when they grow. The sizes include
// the worst case: each shard just past three quarters of a power of two,
// where a table has doubled and is 3/8 full.
func TestFullStoreHeap(t *testing.T) {
	sizes := []int{100_000, 256 * (3*4096/4 + 1)}
	if !testing.Short() {
		sizes = append(sizes, memory.DefaultMaxEntries)
	}
	p := policy(t, limiter.PolicySpec{ID: "size", Algorithm: limiter.TokenBucket,
		Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 1, RefillPeriod: time.Second}})
	for _, n := range sizes {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := newStore(t, memory.Config{MaxEntries: n, Clock: newClock(t0)})
		ctx := context.Background()
		batch := []limiter.Request{{Policy: p, Cost: 1}}
		out := make([]limiter.Outcome, 1)
		refused := 0
		for i := 0; i < n+n/100; i++ {
			batch[0].Subject = subject(uint64(i))
			s.Evaluate(ctx, batch, out)
			if out[0].Kind != limiter.Evaluated {
				refused++
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n || refused != n/100 {
			t.Fatalf("n=%d: %d entries, %d refused; want full and %d refused", n, s.Len(), refused, n/100)
		}
		perEntry := float64(after.HeapInuse-before.HeapInuse) / float64(n)
		t.Logf("n=%d: heap in use %+.1f MiB, %.0f bytes/entry; runtime Sys %+.1f MiB", n,
			float64(after.HeapInuse-before.HeapInuse)/(1<<20), perEntry, (float64(after.Sys)-float64(before.Sys))/(1<<20))
		if perEntry > memory.MaxBytesPerEntry {
			t.Errorf("n=%d: %.0f bytes/entry, above MaxBytesPerEntry %d", n, perEntry, memory.MaxBytesPerEntry)
		}
		runtime.KeepAlive(s)
	}
}
