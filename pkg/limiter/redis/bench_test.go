package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// BenchmarkEvaluate measures one decision per Evaluate call against a local
// redis-server (or REDIS_ADDR), per program, from one goroutine (round-trip
// latency) and from GOMAXPROCS*8 goroutines (auto-pipelined throughput), and
// a four-request batch. Figures go to docs/performance.md; nothing here is
// asserted.
func BenchmarkEvaluate(b *testing.B) {
	srv := redistest.Standalone(b)
	s := newStore(b, Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second})
	policies := []*limiter.Policy{
		fixed(b, "bench.fw", 1_000_000_000_000, time.Hour),
		sliding(b, "bench.sw", 1_000_000_000, time.Hour),
		bucket(b, "bench.tb", 1_000_000_000, 1_000_000, time.Millisecond),
	}
	subjects := make([]limiter.SubjectDigest, 1024)
	for i := range subjects {
		subjects[i] = subjectOf(fmt.Sprintf("bench-%d", i))
	}
	for _, p := range policies {
		b.Run(p.Algorithm().String()+"/single", func(b *testing.B) {
			out := make([]limiter.Outcome, 1)
			req := make([]limiter.Request, 1)
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				req[0] = limiter.Request{Policy: p, Subject: subjects[i%len(subjects)], Cost: 1}
				s.Evaluate(ctx, req, out)
				if out[0].Kind != limiter.Evaluated {
					b.Fatalf("%v: %v", out[0].Kind, out[0].Err)
				}
			}
		})
		b.Run(p.Algorithm().String()+"/parallel", func(b *testing.B) {
			var n atomic.Int64
			b.SetParallelism(8)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				out := make([]limiter.Outcome, 1)
				req := make([]limiter.Request, 1)
				ctx := context.Background()
				for pb.Next() {
					i := n.Add(1)
					req[0] = limiter.Request{Policy: p, Subject: subjects[i%int64(len(subjects))], Cost: 1}
					s.Evaluate(ctx, req, out)
					if out[0].Kind != limiter.Evaluated {
						b.Errorf("%v: %v", out[0].Kind, out[0].Err)
						return
					}
				}
			})
		})
	}
	b.Run("batch4/single", func(b *testing.B) {
		out := make([]limiter.Outcome, 4)
		req := make([]limiter.Request, 4)
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			for j := range req {
				req[j] = limiter.Request{Policy: policies[j%len(policies)], Subject: subjects[(i+j)%len(subjects)], Cost: 1}
			}
			s.Evaluate(ctx, req, out)
			for j := range out {
				if out[j].Kind != limiter.Evaluated {
					b.Fatalf("%v: %v", out[j].Kind, out[j].Err)
				}
			}
		}
	})
}
