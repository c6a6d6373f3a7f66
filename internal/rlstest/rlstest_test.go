package rlstest

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// deny answers OVER_LIMIT to a call whose metadata carries x-deny, and
// echoes the request's domain and first entry in a header.
type deny struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (deny) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-deny")) > 0 {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	e := req.Descriptors[0].Entries[0]
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: req.Domain, Value: e.Key + "=" + e.Value})
	return resp, nil
}

// TestServeCallWantCodes: a request built by Request and Desc reaches the
// served service whole, with Call's metadata, and WantCodes checks each
// answer.
func TestServeCallWantCodes(t *testing.T) {
	conn := Serve(t, func(r grpc.ServiceRegistrar) { rlsv3.RegisterRateLimitServiceServer(r, deny{}) })
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := Request("d", Desc("user", "alice", "route", "/x"))
	resp := Call(t, c, req)
	if h := resp.ResponseHeadersToAdd; resp.OverallCode != rlsv3.RateLimitResponse_OK || len(h) != 1 || h[0].Key != "d" || h[0].Value != "user=alice" {
		t.Fatalf("answer %v", resp)
	}
	if got := Call(t, c, req, "x-deny", "1").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("with x-deny: %v, want OVER_LIMIT", got)
	}
	if n := len(req.Descriptors[0].Entries); n != 2 {
		t.Fatalf("Desc built %d entries, want 2", n)
	}
	WantCodes(t, c, req, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK)
}

// TestRules: a rule file written by WriteRules loads.
func TestRules(t *testing.T) {
	path := WriteRules(t, t.TempDir(), "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	if snap := LoadRules(t, path, []byte("0123456789abcdef0123456789abcdef")); !snap.HasDomain("d") {
		t.Fatal("the written rules have no domain d")
	}
}
