package memory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// BenchmarkMemoryStore: one-request batches from parallel goroutines, per
// algorithm, all on one subject (worst-case lock contention) or spread over
// 100,000 subjects. The store reads the wall clock, as in production.
// Besides ns/op (wall time divided by operations, all goroutines together) it
// reports cpu-ns/op, the process CPU time per operation.
func BenchmarkMemoryStore(b *testing.B) {
	policies := []*limiter.Policy{
		limitertest.Policy(b, limiter.PolicySpec{ID: "fixed", Algorithm: limiter.FixedWindow,
			Params: limiter.FixedWindowParams{Limit: 1_000_000_000, Window: time.Minute}}),
		limitertest.Policy(b, limiter.PolicySpec{ID: "sliding", Algorithm: limiter.SlidingWindow,
			Params: limiter.SlidingWindowParams{Limit: 1_000_000_000, Window: time.Minute}}),
		limitertest.Policy(b, limiter.PolicySpec{ID: "bucket", Algorithm: limiter.TokenBucket,
			Params: limiter.TokenBucketParams{Capacity: 1_000_000_000, RefillAmount: 1_000_000, RefillPeriod: time.Second}}),
	}
	for _, p := range policies {
		for _, subjects := range []int{1, 100_000} {
			b.Run(p.Algorithm().String()+"/subjects="+strconv.Itoa(subjects), func(b *testing.B) {
				s := newStore(b, memory.Config{})
				digests := make([]limiter.SubjectDigest, subjects)
				for i := range digests {
					digests[i] = subject(uint64(i))
				}
				ctx := context.Background()
				warm := make([]limiter.Outcome, 1)
				for _, d := range digests {
					s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: d, Cost: 1}}, warm)
				}
				var seq atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				b.RunParallel(func(pb *testing.PB) {
					// Every other goroutine walks the subjects backwards: two
					// goroutines walking the same way at a fixed distance
					// would meet on the same shard at every step once that
					// distance is a multiple of the shard count (the shard
					// of subject(i) depends on i mod 256 only), a lock
					// convoy real subjects do not form.
					g := seq.Add(1)
					i := int(g*7919) % subjects // different start per goroutine
					step := 1
					if g%2 == 0 {
						step = -1
					}
					batch := []limiter.Request{{Policy: p, Cost: 1}}
					out := make([]limiter.Outcome, 1)
					for pb.Next() {
						i += step
						if i >= subjects {
							i = 0
						} else if i < 0 {
							i = subjects - 1
						}
						batch[0].Subject = digests[i]
						s.Evaluate(ctx, batch, out)
						if out[0].Kind != limiter.Evaluated {
							b.Errorf("outcome %+v", out[0])
							return
						}
					}
				})
				// CPU time per operation, all goroutines and the GC included:
				// unlike ns/op it does not grow when other processes take the
				// machine's cores.
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkMemoryStoreOverflow: one-request batches from parallel
// goroutines, each for a subject never seen before, on a policy that has
// already used its share of the store: every decision is made by the
// policy's overflow sketch (under one lock).
func BenchmarkMemoryStoreOverflow(b *testing.B) {
	p := limitertest.Policy(b, limiter.PolicySpec{ID: "flooded", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 1_000_000_000, Window: time.Minute}})
	s := newStore(b, memory.Config{MaxEntries: 4096})
	ctx := context.Background()
	var next atomic.Uint64
	out := make([]limiter.Outcome, 1)
	for range 8192 { // fill the policy's share
		s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: subject(next.Add(1)), Cost: 1}}, out)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		batch := []limiter.Request{{Policy: p, Cost: 1}}
		out := make([]limiter.Outcome, 1)
		for pb.Next() {
			batch[0].Subject = subject(next.Add(1))
			s.Evaluate(ctx, batch, out)
			if out[0].Kind != limiter.Evaluated || out[0].Decision.Source != limiter.SourceMemoryOverflow {
				b.Errorf("outcome %+v", out[0])
				return
			}
		}
	})
}
