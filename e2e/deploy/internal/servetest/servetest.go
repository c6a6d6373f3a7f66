// Package servetest runs envoy-rls serve for the deployment tests of
// e2e/deploy and talks to it as Envoy and Prometheus do: ShouldRateLimit
// calls over gRPC, and a scrape of /metrics parsed into metric families.
package servetest

import (
	"context"
	"net/http"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// callTimeout bounds one call and one scrape.
const callTimeout = 5 * time.Second

// Server is a running envoy-rls serve and a gRPC client of it.
type Server struct {
	adminAddr string
	client    rlsv3.RateLimitServiceClient
}

// Start runs envoy-rls serve with args (deploytest.Serve: free loopback
// ports, ready, stopped when the test ends) and connects a client, closed
// when the test ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	grpcAddr, adminAddr := deploytest.Serve(t, args...)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &Server{adminAddr: adminAddr, client: rlsv3.NewRateLimitServiceClient(conn)}
}

// Call sends ShouldRateLimit for domain with one descriptor per element of
// descs, as Envoy does, and fails t on a gRPC error.
func (s *Server) Call(t testing.TB, domain string, descs ...[]descriptors.Entry) *rlsv3.RateLimitResponse {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1}
	for _, entries := range descs {
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range entries {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := s.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit %s %v: %v", domain, descs, err)
	}
	return resp
}

// Metrics scrapes /metrics and returns its metric families by name.
func (s *Server) Metrics(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.adminAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return families
}
