package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestServeAnswersOKAndStopsOnCancel(t *testing.T) {
	t.Run("defaults", func(t *testing.T) { serveOnce(t) })
	t.Run("tuned", func(t *testing.T) {
		opts, err := tuning{streamWorkers: 8, sharedWriteBuffer: true, window: 1 << 20}.options()
		if err != nil || len(opts) != 4 {
			t.Fatalf("options: %d, %v; want 4 options", len(opts), err)
		}
		serveOnce(t, opts...)
	})
}

// serveOnce serves with opts, makes one call and stops the server.
func serveOnce(t *testing.T, opts ...grpc.ServerOption) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var log strings.Builder
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, lis, &log, opts...) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "any"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("code = %v, want OK", resp.GetOverallCode())
	}

	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("serve returned %v after cancel", err)
		}
	case <-time.After(shutdownGrace + 2*time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(log.String(), lis.Addr().String()) {
		t.Fatalf("log %q lacks the address", log.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	if err := run(context.Background(), []string{"-nope"}, io.Discard); err == nil {
		t.Error("unknown flag: want error")
	}
	if err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "x"}, io.Discard); err == nil {
		t.Error("stray argument: want error")
	}
	for _, bad := range [][]string{{"-stream-workers", "-1"}, {"-stream-workers", "5000"}, {"-window", "1000"}, {"-window", "2147483647"}} {
		if err := run(context.Background(), append([]string{"-addr", "127.0.0.1:0"}, bad...), io.Discard); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
}

func TestRunWritesCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := run(ctx, []string{"-addr", "127.0.0.1:0", "-cpuprofile", path}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile %s: %v, %v; want a written profile", path, fi, err)
	}
}
