package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
)

func TestParseFlagsDefaults(t *testing.T) {
	cfg, _, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:8081" || cfg.Concurrency != 64 || cfg.Connections != 4 ||
		cfg.Duration != 10*time.Second || cfg.Warmup != time.Second || cfg.Subjects != 10000 ||
		cfg.Dist != loadgen.DistUniform || cfg.Hits != 0 || cfg.Timeout != time.Second || cfg.MaxRequests != 0 {
		t.Fatalf("defaults: %+v", cfg)
	}
	if got := loadgen.FormatDescriptors(cfg.Descriptors); got != "remote_address" {
		t.Fatalf("descriptors = %q", got)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		is   error
	}{
		{name: "remote target", args: []string{"-addr", "10.0.0.8:8081"}, is: loadgen.ErrNotLoopback},
		{name: "bad dist", args: []string{"-dist", "pareto"}, is: loadgen.ErrUnknownDist},
		{name: "bad descriptors", args: []string{"-descriptors", ";"}, is: loadgen.ErrBadDescriptors},
		{name: "duration cap", args: []string{"-duration", "11m"}, is: loadgen.ErrInvalidConfig},
		{name: "stray arg", args: []string{"extra"}},
		{name: "hits overflow", args: []string{"-hits", "4294967296"}},
		{name: "bad aux pid", args: []string{"-aux-pid", "redis"}},
		{name: "aux pid not a number", args: []string{"-aux-pid", "redis=x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseFlags(tc.args, io.Discard)
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
		})
	}
	if _, _, err := parseFlags([]string{"-addr", "10.0.0.8:8081", "-allow-remote"}, io.Discard); err != nil {
		t.Fatalf("-allow-remote: %v", err)
	}
	cfg, _, err := parseFlags([]string{"-aux-pid", "redis=12", "-aux-pid", "db=34"}, io.Discard)
	if err != nil || cfg.AuxPIDs["redis"] != 12 || cfg.AuxPIDs["db"] != 34 {
		t.Fatalf("-aux-pid: %v %v", cfg.AuxPIDs, err)
	}
}

func TestRunPrintsOneJSONLine(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, &loadgen.FloorServer{})
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	var out bytes.Buffer
	args := []string{"-addr", lis.Addr().String(), "-concurrency", "4", "-connections", "2",
		"-duration", "20s", "-warmup", "0s", "-max-requests", "300", "-dist", "zipf",
		"-descriptors", "generic_key=api,remote_address;tenant,user", "-hits", "1", "-label", "cmd test", "-timeout", "10s"}
	if err := run(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var res loadgen.Result
	dec := json.NewDecoder(&out)
	if err := dec.Decode(&res); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Fatal("more than one JSON value on stdout")
	}
	if res.Label != "cmd test" || res.Requests != 300 || res.OK != 300 || res.ErrorsTotal != 0 ||
		res.Dist != "zipf" || res.Descriptors != "generic_key=api,remote_address;tenant,user" {
		t.Fatalf("result: %+v", res)
	}
}
