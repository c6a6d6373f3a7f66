package rls

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// benchServer is the real service (rules, memory store, metrics, a JSON
// logger to nowhere) called in process: it measures the service's own cost,
// not gRPC's.
func benchServer(b *testing.B) *Server {
	b.Helper()
	srv, err := New(benchConfig(b))
	if err != nil {
		b.Fatal(err)
	}
	return srv
}

// benchConfig is the configuration of benchServer, for benchmarks that
// change one part of it.
func benchConfig(b *testing.B) Config {
	b.Helper()
	snap, err := descriptors.Load("testdata/bench/bench.yaml", descriptors.Options{Secret: []byte("0123456789abcdef-bench")})
	if err != nil {
		b.Fatal(err)
	}
	mem, err := memory.New(memory.Config{MaxEntries: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	return Config{Rules: func() Rules { return snap }, Store: mem, Metrics: m, Logger: zap.NewNop()}
}

// BenchmarkShouldRateLimit: one Envoy-shaped call (domain, one descriptor,
// default full headers) answered OK. Target: at most 30 allocs/op.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, bc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"one_descriptor", request("bench", desc("remote_address", "10.1.2.3"))},
		{"three_descriptors", request("bench", desc("remote_address", "10.1.2.3"), desc("tenant", "acme"), desc("tenant", "acme", "route", "/api"))},
		{"over_limit", request("bench", desc("deny", "d"))},
		{"two_limits_one_descriptor", request("bench", desc("api_key", "k1"))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := benchServer(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := srv.ShouldRateLimit(ctx, bc.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkShouldRateLimitParallel is the one-descriptor call from every P.
func BenchmarkShouldRateLimitParallel(b *testing.B) {
	srv := benchServer(b)
	req := request("bench", desc("remote_address", "10.1.2.3"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := srv.ShouldRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
