package rls

import (
	"context"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// topFeed is the binary's top consumers observer, reduced to what the
// benchmark needs.
type topFeed struct{ t *topk.Tracker }

func (f topFeed) ObserveLimit(l LimitObservation) {
	f.t.Record(topk.Observation{Domain: l.Rule.Domain, Policy: l.Rule.Policy.ID(), Key: l.Rule.Key, Subject: l.Subject,
		Hits: l.Hits, Denied: l.Over && !l.Shadow, ShadowDenied: l.Over && l.Shadow})
}

func (topFeed) ObserveCall(CallObservation) {}

// BenchmarkShouldRateLimitTop: the one-descriptor call over 4096 subjects,
// without and with the top consumers tracker fed by the observer: the
// difference is the tracker's cost on the decision path.
func BenchmarkShouldRateLimitTop(b *testing.B) {
	reqs := make([]*rlsv3.RateLimitRequest, 4096)
	for i := range reqs {
		reqs[i] = request("bench", desc("remote_address", "10.1."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)))
	}
	for _, withTop := range []bool{false, true} {
		b.Run(map[bool]string{false: "observer_off", true: "top_on"}[withTop], func(b *testing.B) {
			cfg := benchConfig(b)
			if withTop {
				tr, err := topk.New(topk.Config{})
				if err != nil {
					b.Fatal(err)
				}
				cfg.Observer = topFeed{tr}
			}
			srv, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := 0
				for pb.Next() {
					i = (i + 1) % len(reqs)
					if _, err := srv.ShouldRateLimit(ctx, reqs[i]); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
