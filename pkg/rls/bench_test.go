package rls

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
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
	snap := rulesAt(b, "testdata/bench/bench.yaml")
	mem := memStore(b, nil, 1<<16)
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

// BenchmarkOverLimitAudited: the over-limit call without an auditor, and
// with the binary's audit sink (JSON lines to io.Discard, the queue's
// default size; events dropped when the writer falls behind are counted),
// in full and sampled to 1 %.
func BenchmarkOverLimitAudited(b *testing.B) {
	req := request("bench", desc("deny", "d"))
	for _, bc := range []struct {
		name   string
		sample float64 // 0: no auditor
	}{{"off", 0}, {"sink", 1}, {"sink_sampled_1pc", 0.01}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := benchConfig(b)
			if bc.sample > 0 {
				m, err := audit.NewMetrics(prometheus.NewRegistry())
				if err != nil {
					b.Fatal(err)
				}
				sink, err := audit.New(audit.Config{Writer: audit.NewJSONLines(io.Discard, false), Metrics: m, Sample: bc.sample})
				if err != nil {
					b.Fatal(err)
				}
				defer sink.Close(time.Second)
				cfg.Auditor = benchAuditor{sink}
			}
			srv, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := srv.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchAuditor feeds denials to an audit sink, as the binary does.
type benchAuditor struct{ sink *audit.Sink }

func (a benchAuditor) Denied(d Denial) {
	a.sink.Offer(audit.Event{Time: d.Time, Domain: d.Domain, PolicyID: d.PolicyID, Subject: d.Subject, Cost: d.Cost,
		Limit: d.Limit, Remaining: d.Remaining, RetryAfter: d.RetryAfter, RequestID: d.RequestID, Shadow: d.Shadow, Outcome: audit.OutcomeOverLimit})
}

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

// BenchmarkCodec: the gRPC codec's share of one Envoy-shaped call: reading
// the request (gRPC's protobuf codec, and DecodeRequest, the reader of
// requests that codec refuses) and writing the answer of one descriptor.
func BenchmarkCodec(b *testing.B) {
	req := request("bench", desc("remote_address", "10.1.2.3"))
	var c Codec
	wire, err := c.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	raw := wire.Materialize()
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Unmarshal(wire, &rlsv3.RateLimitRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode_request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := decodeRequest(raw, &rlsv3.RateLimitRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	srv := benchServer(b)
	resp, err := srv.ShouldRateLimit(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("marshal_response", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := c.Marshal(resp)
			if err != nil {
				b.Fatal(err)
			}
			out.Free()
		}
	})
}
