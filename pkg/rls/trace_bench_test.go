package rls

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkShouldRateLimitTraced is BenchmarkShouldRateLimit/one_descriptor
// with tracing on and every call sampled: a parent span stands for the gRPC
// server span (whose own cost, otelgrpc's, is not included), the call adds
// its attributes and a store span, and the spans go through a batch span
// processor to an exporter that drops them.
func BenchmarkShouldRateLimitTraced(b *testing.B) {
	cfg := benchConfig(b)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg.TracerProvider = tp
	srv, err := New(cfg)
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
