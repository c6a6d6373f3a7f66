package e2e_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/statsd/statsdtest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// observabilityRules are the rules of the statsd and audit tests: a limit
// of 5 an hour on one path, one of 2 an hour per user (with the reference's
// detailed_metric), and a shadow rule of 1 an hour.
//
//go:embed testdata/rules/observability.yaml
var observabilityRules string

// TestStatsd: the binary started with --statsd-addr sends
// envoyproxy/ratelimit's stat names and values for a scripted sequence of
// calls to a statsd server on loopback, over TCP (the default, as the
// reference) and UDP; no request value appears in a stat name.
func TestStatsd(t *testing.T) {
	rules := rulesDir(t, observabilityRules)
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto, func(t *testing.T) {
			srv := statsdtest.Start(t, proto)
			args := []string{"--statsd-addr", srv.Addr, "--statsd-flush-interval", "100ms", "--statsd-extra-tags", "env:test"}
			if proto == "udp" {
				args = append(args, "--statsd-protocol", "udp")
			}
			r := startReplica(t, "statsd-"+proto, replicaConfig{Rules: rules, Args: args})
			// path_/login, limit 5 (near threshold 4): 3, 1, 1 hits allowed
			// (the last one near), 2 denied.
			for i, st := range []struct {
				hits uint32
				ok   bool
			}{{3, true}, {1, true}, {1, true}, {2, false}} {
				res := r.call(callTimeout, st.hits, entry{"path", "/login"})
				if res.Err != nil || res.ok() != st.ok {
					t.Fatalf("path call %d: %v, want ok=%v", i, res, st.ok)
				}
			}
			// user (detailed_metric), limit 2 (near threshold 1): two users,
			// three calls each.
			for _, u := range []string{unique("SECRET-a"), unique("SECRET-b")} {
				for range 3 {
					r.mustCall(t, entry{"user", u})
				}
			}
			const tag = ".__env=test"
			want := map[string]int64{"ratelimit_server.ShouldRateLimit.total_requests" + tag: 10}
			statsdtest.AddRule(want, "e2e.path_/login", tag, statsdtest.RuleCounts{Total: 7, Within: 5, Near: 1, Over: 2})
			statsdtest.AddRule(want, "e2e.user", tag, statsdtest.RuleCounts{Total: 6, Within: 4, Near: 2, Over: 2})
			srv.WaitCounters(t, want, 10*time.Second)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			srv.CheckOnlyCounters(t, want)
			if n := srv.Timers()["ratelimit_server.ShouldRateLimit.response_time"+tag]; n != 10 {
				t.Errorf("response_time samples: %d, want 10", n)
			}
			srv.CheckNoLineContains(t, "SECRET")
		})
	}
}

// otlpReceiver collects the trace export requests of a replica, over
// OTLP/HTTP (protobuf) or OTLP/gRPC, on 127.0.0.1.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
	raw  [][]byte // each request as it was received (HTTP) or re-encoded (gRPC)
}

func (o *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest, raw []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reqs = append(o.reqs, req)
	o.raw = append(o.raw, raw)
}

// Export implements the OTLP/gRPC trace service.
func (o *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	raw, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	o.add(req, raw)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// ServeHTTP implements OTLP/HTTP: POST /v1/traces with a protobuf body.
func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, 8<<20)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(raw, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.add(req, raw)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func startOTLPHTTP(t *testing.T) *otlpReceiver {
	t.Helper()
	o := &otlpReceiver{}
	srv := httptest.NewServer(o) // 127.0.0.1
	t.Cleanup(srv.Close)
	o.addr = srv.Listener.Addr().String()
	return o
}

func startOTLPGRPC(t *testing.T) *otlpReceiver {
	t.Helper()
	o := &otlpReceiver{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, o)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	o.addr = lis.Addr().String()
	return o
}

// exported is one span received, with its service name.
type exported struct {
	service string
	span    *tracepb.Span
}

func (o *otlpReceiver) spans() (spans []exported, raw []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, req := range o.reqs {
		for _, rs := range req.GetResourceSpans() {
			svc := stringAttr(rs.GetResource().GetAttributes(), "service.name")
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					spans = append(spans, exported{svc, s})
				}
			}
		}
	}
	return spans, bytes.Join(o.raw, nil)
}

func stringAttr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// TestTracingExportsOTLP: the real binary, configured only by environment
// variables, exports a server span per call with the domain and outcome
// and a store span under it, flushes them at SIGTERM, and sends no
// descriptor value to the collector. Once with the standard OTEL_*
// variables over OTLP/HTTP, once with the reference service's TRACING_*
// aliases over OTLP/gRPC.
func TestTracingExportsOTLP(t *testing.T) {
	rules := rulesDir(t, hourlyRules(1, "user"))
	for _, tc := range []struct {
		name    string
		start   func(*testing.T) *otlpReceiver
		env     func(addr string) []string
		service string
	}{
		{"otel-http", startOTLPHTTP, func(addr string) []string {
			return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr, "OTEL_SERVICE_NAME=e2e-rls"}
		}, "e2e-rls"},
		{"reference-aliases-grpc", startOTLPGRPC, func(addr string) []string {
			return []string{"TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=grpc", "TRACING_SERVICE_NAME=e2e-ref",
				"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr}
		}, "e2e-ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv := tc.start(t)
			r := startReplica(t, tc.name, replicaConfig{Rules: rules, Env: tc.env(recv.addr)})
			user := unique("trace-subject")
			if res := r.mustCall(t, entry{"user", user}); !res.ok() {
				t.Fatalf("first call %v, want OK", res)
			}
			if res := r.mustCall(t, entry{"user", user}); !res.over() {
				t.Fatalf("second call %v, want OVER_LIMIT", res)
			}
			// The batch processor holds the spans (5 s by default); SIGTERM
			// flushes them before the process exits.
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			var spans []exported
			var raw []byte
			polltest.Eventually(t, 5*time.Second, 20*time.Millisecond, "spans at the receiver", func() error {
				spans, raw = recv.spans()
				if len(spans) < 4 {
					return fmt.Errorf("%d spans received, want 4", len(spans))
				}
				return nil
			})
			servers := map[string]bool{}
			serverIDs := map[string]bool{}
			for _, e := range spans {
				if e.service != tc.service {
					t.Errorf("span %q from service %q, want %q", e.span.GetName(), e.service, tc.service)
				}
				if e.span.GetName() == "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
					if d := stringAttr(e.span.GetAttributes(), "envoy_rls.domain"); d != domain {
						t.Errorf("server span domain %q, want %q", d, domain)
					}
					servers[stringAttr(e.span.GetAttributes(), "envoy_rls.outcome")] = true
					serverIDs[string(e.span.GetSpanId())] = true
				}
			}
			if !servers["OK"] || !servers["OVER_LIMIT"] {
				t.Errorf("server span outcomes %v, want OK and OVER_LIMIT", servers)
			}
			stores := 0
			for _, e := range spans {
				if e.span.GetName() == "envoy_rls.store.evaluate" {
					stores++
					if !serverIDs[string(e.span.GetParentSpanId())] {
						t.Errorf("store span's parent is not a server span")
					}
				}
			}
			if stores != 2 {
				t.Errorf("%d store spans, want 2", stores)
			}
			if bytes.Contains(raw, []byte(user)) {
				t.Errorf("the descriptor value %q reached the collector", user)
			}
			if !r.log.contains(`"tracing on"`) {
				t.Errorf("no \"tracing on\" line in the log")
			}
		})
	}
}

// auditCalls sends, with a request id descriptor each: three calls for one
// user (limit 2: the third is denied) and two for a shadow rule (limit 1:
// the second is a shadow denial, answered OK). It returns the raw values
// used, which no event may carry.
func auditCalls(t *testing.T, r *replica) (user, trial string) {
	t.Helper()
	user, trial = unique("SECRET-user"), unique("SECRET-trial")
	send := func(i int, key, value string, wantOK bool) {
		res := r.callMany(callTimeout, 1, entry{key, value}, entry{"request_id", fmt.Sprintf("rid-%s-%d", key, i)})
		if res.Err != nil || res.ok() != wantOK {
			t.Fatalf("%s call %d: %v, want ok=%v", key, i, res, wantOK)
		}
	}
	for i, ok := range []bool{true, true, false} {
		send(i, "user", user, ok)
	}
	for i := range 2 {
		send(i, "trial", trial, true)
	}
	return user, trial
}

// checkAuditEvents checks the two events of auditCalls, as field maps.
func checkAuditEvents(t *testing.T, events []map[string]string, raws ...string) {
	t.Helper()
	if len(events) != 2 {
		t.Fatalf("%d events, want 2: %v", len(events), events)
	}
	over, shadow := events[0], events[1]
	if over["policy_id"] != "e2e/user" || over["shadow"] != "false" || over["outcome"] != "over_limit" ||
		over["request_id"] != "rid-user-2" || over["cost"] != "1" || over["limit"] != "2" || over["remaining"] != "0" || over["domain"] != "e2e" {
		t.Errorf("denial event %v", over)
	}
	if shadow["policy_id"] != "e2e/trial" || shadow["shadow"] != "true" || shadow["request_id"] != "rid-trial-1" {
		t.Errorf("shadow event %v", shadow)
	}
	for _, e := range events {
		if len(e["subject_digest"]) != 64 || e["time"] == "" || e["retry_after_ms"] == "" || e["retry_after_ms"] == "0" {
			t.Errorf("event %v", e)
		}
		for k, v := range e {
			for _, raw := range raws {
				if strings.Contains(k, raw) || strings.Contains(v, raw) {
					t.Errorf("event field %s=%s carries the raw value %s", k, v, raw)
				}
			}
		}
	}
}

// TestAuditStreamRedis: the binary with --audit-sink redis writes one
// stream entry per denial (shadow ones flagged), with the request id of
// the request_id descriptor and no raw value, whichever the limit store.
// The events are read with XRANGE after a SIGTERM, whose drain writes
// what is queued.
func TestAuditStreamRedis(t *testing.T) {
	srv, redisCfg := withStandaloneRedis(t)
	rules := rulesDir(t, observabilityRules)
	for _, store := range []string{"redis", "memory"} {
		t.Run(store, func(t *testing.T) {
			key := unique("e2e:audit:" + store)
			cfg := redisCfg
			cfg.Rules, cfg.Secret = rules, secretFile(t)
			if store == "memory" {
				cfg.Store = "" // the audit stream still goes to --redis-addr
			}
			cfg.Args = []string{"--audit-sink", "redis", "--audit-redis-stream", key, "--audit-redis-maxlen", "1000", "--audit-request-id-key", "request_id"}
			r := startReplica(t, "audit-"+store, cfg)
			user, trial := auditCalls(t, r)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			c, err := redis.NewClient(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone}, "envoy-rls-audit")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			entries, err := c.Do(ctx, c.B().Xrange().Key(key).Start("-").End("+").Build()).AsXRange()
			if err != nil {
				t.Fatalf("XRANGE %s: %v", key, err)
			}
			var events []map[string]string
			for _, e := range entries {
				events = append(events, e.FieldValues)
			}
			checkAuditEvents(t, events, user, trial)
		})
	}
}

// TestAuditFile: --audit-sink file appends JSON lines that parse, one per
// denial, with no raw value.
func TestAuditFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	r := startReplica(t, "audit-file", replicaConfig{Rules: rulesDir(t, observabilityRules), Secret: secretFile(t),
		Args: []string{"--audit-sink", "file", "--audit-file", path, "--audit-request-id-key", "request_id"}})
	user, trial := auditCalls(t, r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		e := map[string]string{}
		for k, v := range m {
			e[k] = fmt.Sprint(v)
		}
		events = append(events, e)
	}
	checkAuditEvents(t, events, user, trial)
}
