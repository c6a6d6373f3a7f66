package rls

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// BenchmarkShouldRateLimitTraced is BenchmarkShouldRateLimit/one_descriptor
// with tracing on and every call sampled: a parent span stands for the gRPC
// server span (whose own cost, otelgrpc's, is not included), the call adds
// its attributes and a store span, and the spans go through a batch span
// processor to an exporter that drops them.
func BenchmarkShouldRateLimitTraced(b *testing.B) {
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
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv, err := New(Config{Rules: func() Rules { return snap }, Store: mem, Metrics: m, Logger: zap.NewNop(), TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	req := request("bench", desc("remote_address", "10.1.2.3"))
	tr := tp.Tracer("bench")
	b.ReportAllocs()
	for b.Loop() {
		ctx, span := tr.Start(context.Background(), "server")
		if _, err := srv.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
		span.End()
	}
}
