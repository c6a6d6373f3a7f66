package rls

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/internal/rlstest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// defaultServer is the service as the binary wires it with default flags
// (internal/app serve): the memory store with its metrics, the local deny
// cache in front of it (and of the leases wrapper) with its metrics, the failure-mode wrapper, the
// service's metrics and the top consumers tracker as observer, all on one
// registry, and full headers.
func defaultServer(b *testing.B) *Server {
	b.Helper()
	reg := prometheus.NewRegistry()
	memMetrics, err := memory.NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	mem, err := memory.New(memory.Config{MaxEntries: memory.DefaultMaxEntries, Observer: memMetrics})
	if err != nil {
		b.Fatal(err)
	}
	cacheMetrics, err := denycache.NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	cache, err := denycache.New(denycache.Config{Store: leases.New(mem, mem), Observer: cacheMetrics})
	if err != nil {
		b.Fatal(err)
	}
	answering, err := failover.New(cache, failover.Config{})
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	top, err := topk.New(topk.Config{})
	if err != nil {
		b.Fatal(err)
	}
	snap := rulesAt(b, "testdata/bench/bench.yaml")
	srv, err := New(Config{Rules: func() Rules { return snap }, Store: answering, Metrics: m, Logger: zap.NewNop(), Observer: topFeed{top}})
	if err != nil {
		b.Fatal(err)
	}
	return srv
}

// BenchmarkShouldRateLimitDefault: the one-descriptor call over 10,000
// uniform subjects (fixed window, never denied) on the binary's default
// wiring (defaultServer), from every P, each call with a deadline as
// Envoy's gRPC calls carry one.
func BenchmarkShouldRateLimitDefault(b *testing.B) {
	values := make([]string, 10_000)
	for i := range values {
		values[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	srv := defaultServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		// One request per goroutine, its value changed per call: a
		// server reads a request it has just decoded, so the request is
		// in cache and only the subjects' states are spread.
		req := request("bench", desc("remote_address", ""))
		i := 0
		for pb.Next() {
			i = (i + 7919) % len(values)
			req.Descriptors[0].Entries[0].Value = values[i]
			if _, err := srv.ShouldRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkShouldRateLimitDefaultGoroutine is BenchmarkShouldRateLimitDefault
// with each call in a new goroutine, as gRPC serves each stream by default:
// it adds the goroutine's start and the growth of its stack to the call's
// depth.
func BenchmarkShouldRateLimitDefaultGoroutine(b *testing.B) {
	values := make([]string, 10_000)
	for i := range values {
		values[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	srv := defaultServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := request("bench", desc("remote_address", ""))
		done := make(chan error)
		i := 0
		for pb.Next() {
			i = (i + 7919) % len(values)
			req.Descriptors[0].Entries[0].Value = values[i]
			go func() {
				_, err := srv.ShouldRateLimit(ctx, req)
				done <- err
			}()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkShouldRateLimitGRPC is BenchmarkShouldRateLimitDefault through
// grpc-go (the binary's codec and handler, over bufconn; the client runs
// in the process too): the one benchmark whose calls run on the stacks
// gRPC gives them, a new goroutine per call under gRPC's own frames, so
// that the service's stack depth shows where it makes them grow.
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	srv := defaultServer(b)
	client := rlsv3.NewRateLimitServiceClient(rlstest.Serve(b, srv.Register, grpc.ForceServerCodecV2(Codec{})))
	values := make([]string, 10_000)
	for i := range values {
		values[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	b.SetParallelism(32) // 64 calls in flight on 2 Ps
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i = (i + 7919) % len(values)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := client.ShouldRateLimit(ctx, request("bench", desc("remote_address", values[i])))
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
