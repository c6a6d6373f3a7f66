package statsd

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// BenchmarkObserve is the request path's cost of the sink: one limit and
// one call observed, from parallel goroutines (docs/observe.md,
// Statsd).
func BenchmarkObserve(b *testing.B) {
	s, err := New(Config{Addr: "127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	o := rls.LimitObservation{Rule: rule("web.path_/login"), Hits: 1, Decided: true, Consumed: true, Limit: 100, Remaining: 10}
	c := rls.CallObservation{Code: codes.OK, Duration: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.ObserveLimit(o)
			s.ObserveCall(c)
		}
	})
}
