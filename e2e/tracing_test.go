package e2e_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

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
	rules := rulesDir(t, `domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
`)
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
