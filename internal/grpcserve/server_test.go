package grpcserve

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// TestServeAndDrain: the server answers health over a real connection and
// serves the rate-limit service; the drain cuts off a call still in flight
// at its timeout, and Serve returns.
func TestServeAndDrain(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("domain: app\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := descriptors.Load(rules, descriptors.Options{Secret: []byte("a-shared-secret-of-32-bytes-----")})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Every call is held until its context ends: a call in flight that
	// the drain has to cut off.
	store := limitertest.NewDouble(t, mem, nil)
	store.Set(limitertest.Fault{Hang: true})
	reg := prometheus.NewRegistry()
	m, err := rls.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	srv, err := New(Config{
		Limits: Limits{MaxConcurrentStreams: DefaultMaxConcurrentStreams, MaxConnections: 4, ReceiveTimeout: time.Minute,
			MaxIncompleteRequests: 8, MaxRecvMsgSize: DefaultMaxRecvMsgSize, KeepaliveTime: time.Minute, KeepaliveTimeout: time.Minute},
		Cuts: m, Registerer: reg, Log: zap.New(core),
	})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.Config{Rules: func() rls.Rules { return snap }, Store: store, Metrics: m, Admission: srv.Admission()})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}
	// The call's deadline bounds the stuck store call, as a store's own
	// timeout does.
	callCtx, callCancel := context.WithTimeout(ctx, 3*time.Second)
	defer callCancel()
	called := make(chan error, 1)
	go func() {
		_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(callCtx, &rlsv3.RateLimitRequest{
			Domain: "app", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "x"}}}},
		})
		called <- err
	}()
	<-store.Entered
	drained := make(chan struct{})
	go func() {
		srv.Drain(200 * time.Millisecond)
		close(drained)
	}()
	// The drain gives up on the call at its timeout, long before the call's
	// own deadline.
	// The drain logs its timeout before it returns: a drain seen finished
	// without that line did not cut the call off. (A poll that comes late,
	// on a loaded machine, may see both.)
	cutOff := func() bool {
		return logs.FilterMessage("drain timeout: cancelling the calls still in flight").Len() > 0
	}
	polltest.Eventually(t, 2*time.Second, 10*time.Millisecond, "drain timeout of a 200ms drain", func() error {
		select {
		case <-drained:
			if !cutOff() {
				t.Fatal("the drain finished without cutting off the call in flight")
			}
			return nil
		default:
		}
		if !cutOff() {
			return errors.New("not logged")
		}
		return nil
	})
	if err := <-called; err == nil {
		t.Fatal("the call in flight was answered after the drain cut it off")
	}
	<-drained
	if err := <-served; err != nil {
		t.Fatalf("Serve after the drain: %v", err)
	}
}
