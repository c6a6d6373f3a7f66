package main

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestServeAnswersOKAndStopsOnCancel(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var log strings.Builder
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, lis, &log) }()

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
}
