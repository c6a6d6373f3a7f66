package rlqsload

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/internal/rlstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// testTick is the service's tick and the proxies' interval in these
// tests: short, so that a run takes a few seconds.
const testTick = 200 * time.Millisecond

// serveRLQS serves the RLQS service of rules, on a memory store, on
// 127.0.0.1 with its ticks running, until the test ends; it returns the
// address.
func serveRLQS(t *testing.T, rules string, limits rlqs.Limits) string {
	t.Helper()
	snap := rlstest.LoadRules(t, rlstest.WriteRules(t, t.TempDir(), rules), []byte("rlqs-load-test-secret-0123456789"))
	mem, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rlqs.New(rlqs.Config{Rules: func() *descriptors.Snapshot { return snap },
		Store: leases.New(mem, mem), Tick: testTick, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc.Register(gs)
	ctx, cancel := context.WithCancel(context.Background())
	served, ticked := make(chan struct{}), make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	go func() { defer close(ticked); svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ticked
		svc.Stop()
		gs.Stop()
		<-served
	})
	return lis.Addr().String()
}

// tinyConfig is a run of 2 proxies × 2 buckets against addr.
func tinyConfig(addr string) Config {
	return Config{Addr: addr, Domain: "bench", Key: "tenant", Proxies: 2, Buckets: 2,
		Interval: testTick, Rate: 5, Ramp: DefaultRamp, Duration: time.Second, Tick: testTick, Probes: 2}
}

const highLimit = `
domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000000}
`

func TestRunTinyFleet(t *testing.T) {
	addr := serveRLQS(t, highLimit, rlqs.Limits{})
	cfg := tinyConfig(addr)
	// The service runs in this process: its CPU is ours, which exercises
	// the /proc path end to end.
	cfg.ServerPID = os.Getpid()
	cfg.AuxPIDs = map[string]int{"self": os.Getpid()}
	cfg.Label = "tiny"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Warning != "" {
		t.Fatalf("warning: %s", res.Warning)
	}
	if res.Label != "tiny" || res.Proxies != 2 || res.Buckets != 2 || res.Messages == 0 ||
		res.Reports != 2*res.Messages || res.ReportsPerS <= 0 || res.Requests == 0 || res.Denied != 0 {
		t.Fatalf("counts: %+v", res)
	}
	if res.StreamsClosed != 0 || res.OpenFailures != 0 || res.ReportsDropped != 0 {
		t.Fatalf("the fleet did not hold: %+v", res)
	}
	if res.ServerCPUUsPerReport == nil || res.ClientCPUUsPerReport == nil || res.OtherCPUCores == nil ||
		res.ProcClockTicksPerS != 100 {
		t.Fatalf("cpu fields: %+v", res)
	}
	if _, ok := res.AuxCPUUsPerReport["self"]; !ok {
		t.Fatalf("aux cpu: %v", res.AuxCPUUsPerReport)
	}
	// Every proxy got an assignment for every probe bucket; none before
	// it asked, none from before the tick that made it.
	if res.ProbeSamples != 4 || res.AssignedP50Ms == nil || res.AssignedMaxMs == nil ||
		*res.AssignedP50Ms <= 0 || *res.AssignedMaxMs < *res.AssignedP50Ms ||
		res.FromTickP50Ms == nil || res.FromTickMaxMs == nil || *res.FromTickMaxMs < *res.FromTickP50Ms {
		t.Fatalf("probes: %+v", res)
	}
}

// A limit the load exceeds (864 a day, 0.01/s, for 2 proxies sending
// 10/s each to a bucket; a fresh window divides what remains over the time
// left, so only the last 43 s of a day would let 20/s through): the
// proxies' quotas deny, and the result says the run measured no fleet at
// ease.
func TestRunWarnsOfDenials(t *testing.T) {
	addr := serveRLQS(t, `
domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 864}
`, rlqs.Limits{})
	cfg := tinyConfig(addr)
	cfg.Rate, cfg.Probes = 10, 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Denied == 0 || !strings.Contains(res.Warning, "denied") {
		t.Fatalf("denied %d, warning %q", res.Denied, res.Warning)
	}
	if res.ProbeSamples != 0 || res.AssignedMaxMs != nil {
		t.Fatalf("probes without probing: %+v", res)
	}
}

// A server that ends each stream at its second bucket: no proxy ever
// holds both assignments, and the run fails within its bound rather than
// measure a fleet that does not hold.
func TestRunFailsWhenTheFleetDoesNotHold(t *testing.T) {
	addr := serveRLQS(t, highLimit, rlqs.Limits{BucketsPerStream: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Run(ctx, tinyConfig(addr))
	if err == nil || !strings.Contains(err.Error(), "lack an assignment that admits") {
		t.Fatalf("err = %v, want the proxies lacking assignments", err)
	}
}

func TestRunCancelled(t *testing.T) {
	addr := serveRLQS(t, highLimit, rlqs.Limits{})
	cfg := tinyConfig(addr)
	cfg.Duration = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := Run(ctx, cfg); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
}
