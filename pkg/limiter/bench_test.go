package limiter_test

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// BenchmarkApply is the pure algorithm cost, without a store: the state of
// one subject evaluated at an advancing time.
func BenchmarkApply(b *testing.B) {
	for _, p := range []*limiter.Policy{
		fixed(b, 1_000_000_000, time.Minute),
		sliding(b, 1_000_000_000, time.Minute),
		bucket(b, 1_000_000_000, 1_000_000, time.Second),
		gcraPolicy(b, 1_000_000_000, 1_000_000, time.Second),
	} {
		b.Run(p.Algorithm().String(), func(b *testing.B) {
			b.ReportAllocs()
			var st limiter.State
			now := t0
			for b.Loop() {
				now++
				next, r, write := limiter.Apply(st, now, p, 1)
				if write {
					st = next
				} else if r.Status != limiter.StatusDenied {
					b.Fatalf("reply %+v", r)
				}
			}
		})
	}
}
