// Command rlqs-load measures an RLQS server (Envoy's Rate Limit Quota
// Service, envoy.service.rate_limit_quota.v3) under a fleet of simulated
// proxies: -proxies proxies, each reporting -buckets buckets every
// -interval and deciding -rate requests a second per bucket from the
// quotas it is assigned. Once every bucket holds an assignment and after
// -warmup, it measures for -duration, then times -probes new buckets'
// first assignments, and prints ONE JSON line on stdout: reports per
// second, the server's (-server-pid) and other processes' (-aux-pid) CPU
// µs per bucket report, and the assignment times.
//
//	rlqs-load -addr 127.0.0.1:8081 -proxies 20 -buckets 500 -interval 1s \
//	    -duration 10s -server-pid $(pgrep -n envoy-rls)
//
// The rule set must limit the bucket key (-key, default tenant) of the
// domain (-domain, default bench) highly enough that no request is denied,
// e.g. tools/config/bench/rlqs.yaml. tools/scripts/bench.sh --mode rlqs
// starts the server (and Redis) and runs it. It refuses any target outside
// the loopback range unless -allow-remote is given.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
	"github.com/envoy-rls/envoy-rls/tools/internal/rlqsload"
)

func main() { loadgen.Main("rlqs-load", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	res, err := rlqsload.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if res.Warning != "" {
		fmt.Fprintln(stderr, "rlqs-load: warning:", res.Warning)
	}
	return res.WriteJSONLine(stdout)
}

// parseFlags returns the validated run config.
func parseFlags(args []string, stderr io.Writer) (cfg rlqsload.Config, err error) {
	fs := flag.NewFlagSet("rlqs-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Addr, "addr", loadgen.DefaultAddr, "RLQS gRPC address (host:port; loopback only unless -allow-remote)")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "permit a target outside 127.0.0.0/8, ::1 and localhost")
	fs.StringVar(&cfg.Domain, "domain", rlqsload.DefaultDomain, "the reports' domain")
	fs.StringVar(&cfg.Key, "key", rlqsload.DefaultKey, "the bucket ID's key; bucket k is {key: t<k>}")
	fs.IntVar(&cfg.Proxies, "proxies", rlqsload.DefaultProxies, fmt.Sprintf("simulated proxies, one connection and stream each (at most %d)", rlqsload.MaxProxies))
	fs.IntVar(&cfg.Buckets, "buckets", rlqsload.DefaultBuckets, fmt.Sprintf("buckets per proxy (with -probes, at most %d)", rlqsload.MaxBuckets))
	fs.BoolVar(&cfg.Disjoint, "disjoint", false, "give each proxy buckets of its own ({key: t<p>-<k>}) rather than the same ones")
	fs.DurationVar(&cfg.Interval, "interval", rlqsload.DefaultInterval, "the proxies' reporting interval")
	fs.Float64Var(&cfg.Rate, "rate", rlqsload.DefaultRate, "requests per second per bucket, at each proxy")
	fs.Float64Var(&cfg.Ramp, "ramp", rlqsload.DefaultRamp, "new buckets per second per proxy while they are made (each is reported at once in a message of its own)")
	fs.DurationVar(&cfg.Warmup, "warmup", rlqsload.DefaultWarmup, "unmeasured phase once every bucket holds an assignment")
	fs.DurationVar(&cfg.Duration, "duration", rlqsload.DefaultDuration, fmt.Sprintf("measured phase (at most %v)", rlqsload.MaxDuration))
	fs.DurationVar(&cfg.Tick, "tick", rlqsload.DefaultTick, "the server's --rlqs-tick")
	fs.IntVar(&cfg.Probes, "probes", rlqsload.DefaultProbes, "times every proxy requests a new bucket, after the measured phase, to time its first assignment")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "server PID: report its CPU µs per bucket report from /proc/<pid>/stat (clock ticks assumed 100/s)")
	loadgen.DefineAuxPIDs(fs, &cfg.AuxPIDs, "bucket report")
	fs.StringVar(&cfg.Label, "label", "", "free text copied into the JSON")
	if err = fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, cfg.Validate()
}
