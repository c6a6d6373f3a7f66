// Command rls-floor is the "do-nothing floor" for benchmarks: a gRPC
// envoy.service.ratelimit.v3.RateLimitService that answers OK at once, with
// no rules and no store. Measuring it with rls-load shows what gRPC and the
// machine cost before any rate limiting.
//
//	rls-floor -addr 127.0.0.1:18081
//
// By default it is grpc-go with its default options, the floor the
// service is compared with. The tuning flags (-stream-workers,
// -shared-write-buffer, -window) measure what those server options buy a
// server that does nothing else.
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
	"runtime/pprof"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
)

// shutdownGrace bounds the graceful stop before open streams are cut.
const shutdownGrace = 5 * time.Second

func main() {
	loadgen.Main("rls-floor", func(ctx context.Context, args []string, _, stderr io.Writer) error {
		return run(ctx, args, stderr)
	})
}

// run serves until ctx is done. It prints the bound address to logw once
// listening, so "-addr 127.0.0.1:0" can be used.
func run(ctx context.Context, args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("rls-floor", flag.ContinueOnError)
	fs.SetOutput(logw)
	addr := fs.String("addr", loadgen.DefaultAddr, "gRPC listen address")
	var t tuning
	fs.IntVar(&t.streamWorkers, "stream-workers", 0, "grpc.NumStreamWorkers (0: a goroutine per call, gRPC's default)")
	fs.BoolVar(&t.sharedWriteBuffer, "shared-write-buffer", false, "grpc.SharedWriteBuffer: release a connection's write buffer after each flush")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole serve to this file (go tool pprof)")
	fs.IntVar(&t.window, "window", 0, "grpc.InitialWindowSize and InitialConnWindowSize in bytes, at least 65535 (0: gRPC's default, a window sized by BDP estimation)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts, err := t.options()
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	return serve(ctx, lis, logw, opts...)
}

// tuning is the server options the flags set; the zero value is gRPC's
// defaults.
type tuning struct {
	streamWorkers     int
	sharedWriteBuffer bool
	window            int
}

func (t tuning) options() ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	if t.streamWorkers < 0 || t.streamWorkers > 4096 {
		return nil, fmt.Errorf("-stream-workers %d: want 0 to 4096", t.streamWorkers)
	}
	if t.streamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(t.streamWorkers)))
	}
	if t.sharedWriteBuffer {
		opts = append(opts, grpc.SharedWriteBuffer(true))
	}
	switch {
	case t.window == 0:
	case t.window < 65535 || t.window > 1<<30:
		return nil, fmt.Errorf("-window %d: want 65535 to %d bytes", t.window, 1<<30)
	default:
		opts = append(opts, grpc.InitialWindowSize(int32(t.window)), grpc.InitialConnWindowSize(int32(t.window)))
	}
	return opts, nil
}

func serve(ctx context.Context, lis net.Listener, logw io.Writer, opts ...grpc.ServerOption) error {
	srv := grpc.NewServer(opts...)
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
