package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// startServer serves srv on 127.0.0.1:0 until the test ends.
func startServer(t *testing.T, srv rlsv3.RateLimitServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String()
}

func TestRunAgainstFloorServer(t *testing.T) {
	addr := startServer(t, &FloorServer{})
	cfg := validConfig(addr)
	cfg.Concurrency = 8
	cfg.Duration = time.Second
	cfg.Warmup = 100 * time.Millisecond
	cfg.MaxRequests = 2000
	cfg.Label = "e2e"
	// The server runs in this process: its CPU is ours, which exercises the
	// /proc path end to end.
	cfg.ServerPID = os.Getpid()
	cfg.AuxPIDs = map[string]int{"self": os.Getpid()}
	cfg.Timeout = 10 * time.Second // generous: CI shares two cores with -race

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("run took %v; it is bounded by about 1.1 s plus the connect and the tail", took)
	}
	if res.ErrorsTotal != 0 || len(res.Errors) != 0 {
		t.Fatalf("errors: %v", res.Errors)
	}
	if res.Requests != res.OK+res.OverLimit+res.Unknown+res.ErrorsTotal {
		t.Fatalf("counts do not add up: %+v", res)
	}
	if res.OK != res.Requests || res.OverLimit != 0 || res.Unknown != 0 {
		t.Fatalf("floor answers OK only: ok=%d over=%d unknown=%d of %d", res.OK, res.OverLimit, res.Unknown, res.Requests)
	}
	if res.Requests == 0 || res.Requests > cfg.MaxRequests {
		t.Fatalf("requests = %d, want 1..%d", res.Requests, cfg.MaxRequests)
	}
	if res.DurationS <= 0 || res.DurationS > (cfg.Duration+cfg.Timeout).Seconds() || res.RPS <= 0 {
		t.Fatalf("duration %v s, rps %v", res.DurationS, res.RPS)
	}
	if !(res.P50Ms > 0 && res.P50Ms <= res.P90Ms && res.P90Ms <= res.P99Ms && res.P99Ms <= res.P999Ms && res.P999Ms <= res.MaxMs) {
		t.Fatalf("quantiles not ordered: %v %v %v %v max %v", res.P50Ms, res.P90Ms, res.P99Ms, res.P999Ms, res.MaxMs)
	}
	if res.ClientCPUUsPerDecision == nil || res.ServerCPUUsPerDecision == nil || res.ProcClockTicksPerS != 100 {
		t.Fatalf("cpu fields: client %v server %v ticks %d", res.ClientCPUUsPerDecision, res.ServerCPUUsPerDecision, res.ProcClockTicksPerS)
	}
	if res.OtherCPUCores == nil || *res.OtherCPUCores < 0 {
		t.Fatalf("other_cpu_cores = %v", res.OtherCPUCores)
	}
	if _, ok := res.AuxCPUUsPerDecision["self"]; !ok {
		t.Fatalf("aux cpu: %v", res.AuxCPUUsPerDecision)
	}

	var buf bytes.Buffer
	if err := res.WriteJSONLine(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Count(buf.String(), "\n") != 1 || !strings.HasSuffix(buf.String(), "\n") {
		t.Fatalf("not one line: %q", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"label", "addr", "concurrency", "connections", "duration_s", "requests", "rps", "ok", "over_limit", "errors", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "client_cpu_us_per_decision", "server_cpu_us_per_decision"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
}

// scriptedServer answers by call number: every 3rd call OVER_LIMIT, every
// 5th call fails with ResourceExhausted, the rest OK. It also checks the
// request shape.
type scriptedServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Uint64
	bad   atomic.Uint64
}

func (s *scriptedServer) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if r.GetDomain() != "bench" || r.GetHitsAddend() != 2 || len(r.GetDescriptors()) != 1 ||
		!strings.HasPrefix(r.GetDescriptors()[0].GetEntries()[0].GetValue(), "s-") {
		s.bad.Add(1)
	}
	n := s.calls.Add(1)
	switch {
	case n%5 == 0:
		return nil, status.Error(codes.ResourceExhausted, "scripted")
	case n%3 == 0:
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

func TestRunCountsOutcomesAndErrorCodes(t *testing.T) {
	srv := &scriptedServer{}
	addr := startServer(t, srv)
	cfg := validConfig(addr)
	cfg.Warmup = 0
	cfg.Hits = 2
	cfg.Timeout = 10 * time.Second
	cfg.MaxRequests = 600
	cfg.Duration = 20 * time.Second
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != cfg.MaxRequests {
		t.Fatalf("requests = %d, want exactly %d (the bound ends the run)", res.Requests, cfg.MaxRequests)
	}
	if srv.calls.Load() != res.Requests {
		t.Fatalf("server saw %d calls, tool counted %d", srv.calls.Load(), res.Requests)
	}
	if srv.bad.Load() != 0 {
		t.Fatalf("%d malformed requests", srv.bad.Load())
	}
	// Of calls 1..600: 120 are multiples of 5; of the rest, multiples of 3
	// not of 5: 200 - 40 = 160.
	if res.Errors["ResourceExhausted"] != 120 || res.ErrorsTotal != 120 || res.OverLimit != 160 || res.OK != 320 {
		t.Fatalf("ok=%d over=%d errors=%v", res.OK, res.OverLimit, res.Errors)
	}
}

func TestRunRefusesUnreachableAndRemote(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := Run(ctx, validConfig(addr)); err == nil {
		t.Error("unreachable server: want error")
	}
	if _, err := Run(context.Background(), validConfig("192.0.2.1:8081")); err == nil {
		t.Error("remote target: want error")
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	addr := startServer(t, &FloorServer{})
	cfg := validConfig(addr)
	cfg.Duration = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Run(ctx, cfg); err == nil {
		t.Fatal("want the context's error")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cancel took %v to stop the run", took)
	}
}

// statusServer answers OK with one status per descriptor, carrying a
// current limit when limited.
type statusServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	limited bool
}

func (s *statusServer) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range r.GetDescriptors() {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		if s.limited {
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

// TestRunWarnsWhenUnmatched: a run whose every answer carries statuses
// without a current limit (no rule matched) counts them as unmatched and
// says so in a warning; answers with a limit, and the floor's answers
// without statuses, are not unmatched.
func TestRunWarnsWhenUnmatched(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  rlsv3.RateLimitServiceServer
		warn bool
	}{
		{"no rule matched", &statusServer{}, true},
		{"a rule matched", &statusServer{limited: true}, false},
		{"floor", &FloorServer{}, false},
	} {
		cfg := validConfig(startServer(t, tc.srv))
		cfg.Warmup, cfg.MaxRequests, cfg.Duration, cfg.Timeout = 0, 50, 20*time.Second, 10*time.Second
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := `no answer carried a limit: the server matched no rule of domain "bench" to descriptors "remote_address"`
		if tc.warn && (res.Unmatched != res.Decisions() || !strings.HasPrefix(res.Warning, want)) ||
			!tc.warn && (res.Unmatched != 0 || res.Warning != "") {
			t.Errorf("%s: %d unmatched of %d, warning %q", tc.name, res.Unmatched, res.Decisions(), res.Warning)
		}
	}
}
