// Command rls-load is a closed-loop load generator for any Envoy rate limit
// service (gRPC envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit).
// Each of -concurrency workers keeps one call in flight; after -warmup it
// measures for -duration (or -max-requests calls) and prints ONE JSON line
// on stdout: throughput, latency quantiles, OK / OVER_LIMIT / error counts
// and, given -server-pid, the server's CPU µs per decision from /proc.
//
//	rls-load -addr 127.0.0.1:8081 -concurrency 64 -connections 4 \
//	    -duration 10s -domain bench -descriptors remote_address \
//	    -subjects 10000 -dist uniform -server-pid $(pgrep -n envoy-rls)
//
// Descriptor values are synthetic ("s-<n>"). It refuses any target outside
// the loopback range unless -allow-remote is given.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
)

func main() { loadgen.Main("rls-load", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, prof, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if prof != "" {
		f, err := os.Create(prof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if res.Warning != "" {
		fmt.Fprintln(stderr, "rls-load: warning:", res.Warning)
	}
	return res.WriteJSONLine(stdout)
}

// parseFlags returns the validated run config and the -cpuprofile path.
func parseFlags(args []string, stderr io.Writer) (cfg loadgen.Config, cpuProfile string, err error) {
	fs := flag.NewFlagSet("rls-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Addr, "addr", loadgen.DefaultAddr, "RLS v3 gRPC address (host:port; loopback only unless -allow-remote)")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "permit a target outside 127.0.0.0/8, ::1 and localhost")
	fs.IntVar(&cfg.Concurrency, "concurrency", loadgen.DefaultConcurrency, "closed-loop workers, one call in flight each")
	fs.IntVar(&cfg.Connections, "connections", loadgen.DefaultConnections, "gRPC client connections, shared round-robin by the workers")
	fs.DurationVar(&cfg.Duration, "duration", loadgen.DefaultDuration, fmt.Sprintf("measured phase (at most %v)", loadgen.MaxDuration))
	fs.DurationVar(&cfg.Warmup, "warmup", loadgen.DefaultWarmup, "unmeasured phase before the measured one")
	fs.Uint64Var(&cfg.MaxRequests, "max-requests", 0, "end the measured phase after this many calls (0 = only -duration)")
	fs.StringVar(&cfg.Domain, "domain", loadgen.DefaultDomain, "rate limit domain")
	desc := fs.String("descriptors", loadgen.DefaultDescriptors,
		"descriptors: ';' between descriptors, ',' between entry keys; key=value fixes a value, a bare key gets the subject \"s-<n>\"")
	fs.IntVar(&cfg.Subjects, "subjects", loadgen.DefaultSubjects, "number of distinct synthetic subjects")
	dist := fs.String("dist", string(loadgen.DistUniform), "subject distribution: uniform or zipf (s=1.1)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the subject draws (each worker has its own stream)")
	hits := fs.Uint("hits", 0, "hits_addend per request (0 = unset)")
	fs.DurationVar(&cfg.Timeout, "timeout", loadgen.DefaultTimeout, "per-call deadline")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "server PID: report its CPU µs per decision from /proc/<pid>/stat (clock ticks assumed 100/s)")
	loadgen.DefineAuxPIDs(fs, &cfg.AuxPIDs, "decision")
	fs.StringVar(&cfg.Label, "label", "", "free text copied into the JSON")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write the load tool's own CPU profile to this file")
	if err = fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.Descriptors, err = loadgen.ParseDescriptors(*desc); err != nil {
		return cfg, "", err
	}
	if cfg.Dist, err = loadgen.ParseDist(*dist); err != nil {
		return cfg, "", err
	}
	if *hits > 1<<32-1 {
		return cfg, "", fmt.Errorf("-hits %d does not fit in uint32", *hits)
	}
	cfg.Hits = uint32(*hits)
	return cfg, cpuProfile, cfg.Validate()
}
