// Command rls-floor is the "do-nothing floor" for benchmarks: a gRPC
// envoy.service.ratelimit.v3.RateLimitService that answers OK at once, with
// no rules and no store. Measuring it with rls-load shows what gRPC and the
// machine cost before any rate limiting.
//
//	rls-floor -addr 127.0.0.1:18081
//
// It serves until SIGINT or SIGTERM, then stops gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
)

// shutdownGrace bounds the graceful stop before open streams are cut.
const shutdownGrace = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rls-floor:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done. It prints the bound address to logw once
// listening, so "-addr 127.0.0.1:0" can be used.
func run(ctx context.Context, args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("rls-floor", flag.ContinueOnError)
	fs.SetOutput(logw)
	addr := fs.String("addr", loadgen.DefaultAddr, "gRPC listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return serve(ctx, lis, logw)
}

func serve(ctx context.Context, lis net.Listener, logw io.Writer) error {
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, &loadgen.FloorServer{})
	fmt.Fprintf(logw, "rls-floor listening on %s (pid %d)\n", lis.Addr(), os.Getpid())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
		srv.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
