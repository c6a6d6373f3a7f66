package algorithm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
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
			var st algorithm.State
			now := t0
			for b.Loop() {
				now++
				next, r, write := algorithm.Apply(st, now, p, 1)
				if write {
					st = next
				} else if r.Status != algorithm.StatusDenied {
					b.Fatalf("reply %+v", r)
				}
			}
		})
	}
	// The sliding log's cost grows with its log: a state of n hits in the
	// window (limit 1000: 999 leave room, 1000 deny), not written back.
	p := slidingLog(b, 1000, time.Hour)
	for _, n := range []int64{5, 100, 999, 1000} {
		b.Run(fmt.Sprintf("sliding_log/log=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var log []byte
			for i := range n {
				log = algorithm.AppendSlidingLogEntry(log, t0-n+i, 1)
			}
			st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(),
				Revision: p.Revision(), LastObservedMs: t0, Log: string(log)}
			for b.Loop() {
				if _, r, _ := algorithm.Apply(st, t0, p, 1); (r.Status == algorithm.StatusAllowed) != (n < 1000) {
					b.Fatalf("reply %+v", r)
				}
			}
		})
	}
}
