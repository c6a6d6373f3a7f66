// Package rlstest is how tests reach a rate-limit service: it serves one
// on an in-memory gRPC listener, builds ShouldRateLimit requests, sends
// them with a bounded deadline, and writes and loads rule files. It imports
// no package that serves (pkg/rls's own tests use it); the packages' test
// harnesses add what they assemble around the service.
package rlstest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// CallTimeout bounds each call Call sends.
const CallTimeout = 5 * time.Second

// Serve serves what register registers on a gRPC server with opts (the
// binary's codec, for one) over an in-memory listener, and returns a
// client connection to it. Both stop when the test ends.
func Serve(t testing.TB, register func(grpc.ServiceRegistrar), opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(opts...)
	register(gs)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		gs.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
	})
	return conn
}

// Desc builds a descriptor from alternating key, value strings.
func Desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// Request is a ShouldRateLimit request of domain for ds.
func Request(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// Call sends req over c within CallTimeout, with md as outgoing metadata
// (key, value pairs), and fails the test if the call fails.
func Call(t testing.TB, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, md ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	resp, err := c.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, md...), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// WantCodes sends req over c once per code of want, in order, and fails at
// the first call whose answer is not that code.
func WantCodes(t testing.TB, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, want ...rlsv3.RateLimitResponse_Code) {
	t.Helper()
	for i, w := range want {
		if got := Call(t, c, req).OverallCode; got != w {
			t.Fatalf("call %d of %v: %v, want %v", i+1, req.Descriptors, got, w)
		}
	}
}

// WriteRules writes text as the rule file rules.yaml of dir and returns
// its path.
func WriteRules(t testing.TB, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// LoadRules loads the rule file at path, its subjects keyed by secret.
func LoadRules(t testing.TB, path string, secret []byte) *descriptors.Snapshot {
	t.Helper()
	snap, err := descriptors.Load(path, descriptors.Options{Secret: secret})
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	return snap
}

// Logger is a logger of every level whose entries the test reads.
func Logger() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}
