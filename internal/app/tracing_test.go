package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// The span and attribute names docs/observe.md lists, as tracing backends
// see them.
const (
	storeSpanName      = "envoy_rls.store.evaluate"
	redisBatchSpanName = "envoy_rls.redis.batch"
)

var (
	attrDomain      = attribute.Key("envoy_rls.domain")
	attrDescriptors = attribute.Key("envoy_rls.descriptors")
	attrPolicies    = attribute.Key("envoy_rls.policies")
	attrBatchSize   = attribute.Key("envoy_rls.batch_size")
	attrOutcome     = attribute.Key("envoy_rls.outcome")
)

// Trace context a test sends as the caller's (Envoy's) span.
var (
	callerTrace = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	callerSpan  = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	b3Trace     = trace.TraceID{0x80, 0xf1, 0x98, 0xee, 0x56, 0x34, 0x3b, 0xa8, 0x64, 0xfe, 0x8b, 0x2a, 0x57, 0xd3, 0xef, 0xf7}
	b3Span      = trace.SpanID{0xe4, 0x57, 0xb5, 0xa2, 0xe4, 0xd8, 0x6b, 0xd1}
)

// awaitSpans polls exp until it holds n spans of trace id (a span ends,
// and is exported, after the answer has left).
func awaitSpans(t *testing.T, exp *keptSpans, id trace.TraceID, n int) tracetest.SpanStubs {
	t.Helper()
	var got tracetest.SpanStubs
	waitFor(t, func() bool {
		got = got[:0]
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == id {
				got = append(got, s)
			}
		}
		return len(got) >= n
	})
	return got
}

func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no span %q among %d: %v", name, len(spans), spanNames(spans))
	return tracetest.SpanStub{}
}

func spanNames(spans tracetest.SpanStubs) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return names
}

func attr(s tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// wantAttrs checks the attributes of s that want lists.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want ...attribute.KeyValue) {
	t.Helper()
	for _, w := range want {
		v, ok := attr(s, w.Key)
		if !ok || v != w.Value {
			t.Errorf("span %q: %s = %v (present %v), want %v; attributes %v", s.Name, w.Key, v.Emit(), ok, w.Value.Emit(), s.Attributes)
		}
	}
}

// noRawValues fails when any of values appears in any span's name,
// attributes, events, links or status.
func noRawValues(t *testing.T, spans tracetest.SpanStubs, values ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name, s.Status.Description}
		for _, kv := range s.Attributes {
			texts = append(texts, string(kv.Key), kv.Value.Emit())
		}
		for _, e := range s.Events {
			texts = append(texts, e.Name)
			for _, kv := range e.Attributes {
				texts = append(texts, string(kv.Key), kv.Value.Emit())
			}
		}
		for _, kv := range s.Resource.Attributes() {
			texts = append(texts, kv.Value.Emit())
		}
		for _, text := range texts {
			for _, v := range values {
				if strings.Contains(text, v) {
					t.Errorf("span %q records the descriptor value %q: %q", s.Name, v, text)
				}
			}
		}
	}
}

const (
	serverSpanName = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	appPolicy      = "app/user"
)

func TestTracingSpans(t *testing.T) {
	exp := newKeptSpans()
	rules := writeRules(t, t.TempDir(), testRules)
	r := startServe(t, []string{"--config", rules}, map[string]string{"ENVOY_RLS_TRACING": "true"}, hooks{spanExporter: exp})
	const user = "raw-subject-7f3a"

	// W3C traceparent from the caller: the server span is its child, the
	// store span the server span's child.
	traceparent := fmt.Sprintf("00-%s-%s-01", callerTrace, callerSpan)
	if got := r.check(t, user, "traceparent", traceparent).OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call %v, want OK", got)
	}
	spans := awaitSpans(t, exp, callerTrace, 2)
	srv := spanNamed(t, spans, serverSpanName)
	if srv.SpanKind != trace.SpanKindServer || srv.Parent.SpanID() != callerSpan || !srv.Parent.IsRemote() {
		t.Errorf("server span kind %v parent %v (remote %v), want server, child of the caller's %v", srv.SpanKind, srv.Parent.SpanID(), srv.Parent.IsRemote(), callerSpan)
	}
	wantAttrs(t, srv,
		attrDomain.String("app"),
		attrDescriptors.Int(1),
		attrPolicies.StringSlice([]string{appPolicy}),
		attrBatchSize.Int(1),
		attrOutcome.String("OK"))
	st := spanNamed(t, spans, storeSpanName)
	if st.Parent.SpanID() != srv.SpanContext.SpanID() {
		t.Errorf("store span's parent %v, want the server span %v", st.Parent.SpanID(), srv.SpanContext.SpanID())
	}
	wantAttrs(t, st, attrBatchSize.Int(1), attrPolicies.StringSlice([]string{appPolicy}), attrOutcome.String("allowed"))

	// B3 (multiple headers, as Envoy's Zipkin tracer sends them): the
	// second call allowed, the third denied.
	r.check(t, user, "x-b3-traceid", b3Trace.String(), "x-b3-spanid", b3Span.String(), "x-b3-sampled", "1")
	if got := r.check(t, user, "b3", fmt.Sprintf("%s-%s-1", b3Trace, b3Span)).OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("third call %v, want OVER_LIMIT", got)
	}
	b3Spans := awaitSpans(t, exp, b3Trace, 4)
	var outcomes, storeOutcomes []string
	for _, s := range b3Spans {
		switch s.Name {
		case serverSpanName:
			if s.Parent.SpanID() != b3Span {
				t.Errorf("B3 call: server span's parent %v, want %v", s.Parent.SpanID(), b3Span)
			}
			v, _ := attr(s, attrOutcome)
			outcomes = append(outcomes, v.AsString())
		case storeSpanName:
			v, _ := attr(s, attrOutcome)
			storeOutcomes = append(storeOutcomes, v.AsString())
		}
	}
	slices.Sort(outcomes)
	slices.Sort(storeOutcomes)
	if !slices.Equal(outcomes, []string{"OK", "OVER_LIMIT"}) || !slices.Equal(storeOutcomes, []string{"allowed", "denied"}) {
		t.Errorf("B3 calls: server outcomes %v, store outcomes %v; want [OK OVER_LIMIT] and [allowed denied]", outcomes, storeOutcomes)
	}

	// Health checks are not traced; a call without trace context starts a
	// trace of its own.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	r.check(t, "another-raw-subject")
	waitFor(t, func() bool { return len(exp.GetSpans()) >= 8 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if !exp.shutdown.Load() {
		t.Error("the tracer provider was not shut down at stop")
	}
	all := exp.GetSpans()
	for _, s := range all {
		if strings.Contains(s.Name, "Health") {
			t.Errorf("health check traced: %q", s.Name)
		}
	}
	if len(all) != 8 {
		t.Errorf("%d spans, want 8 (4 calls × server and store): %v", len(all), spanNames(all))
	}
	noRawValues(t, all, user, "another-raw-subject")
}

// TestTracingOff: without a tracing setting no span is made, even with an
// exporter at hand.
func TestTracingOff(t *testing.T) {
	exp := newKeptSpans()
	rules := writeRules(t, t.TempDir(), testRules)
	r := startServe(t, []string{"--config", rules}, nil, hooks{spanExporter: exp})
	r.check(t, "u", "traceparent", fmt.Sprintf("00-%s-%s-01", callerTrace, callerSpan))
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans with tracing off, want 0", n)
	}
}

// TestTracingRedisSpans: with the Redis store each program run is a span,
// the child of the store span, and records neither keys nor arguments.
func TestTracingRedisSpans(t *testing.T) {
	redistest.RedisLane(t)
	srv := redistest.Standalone(t, redistest.Local())
	exp := newKeptSpans()
	rules := writeRules(t, t.TempDir(), testRules)
	env := map[string]string{options.SecretEnv: "a-shared-secret-of-32-bytes-----", "ENVOY_RLS_REDIS_ADDR": srv.Addr(), "TRACING_ENABLED": "true"}
	r := startServe(t, []string{"--config", rules, "--store", "redis", "--redis-timeout", "300ms"}, env, hooks{spanExporter: exp})
	const user = "redis-raw-subject-91c2"

	r.check(t, user, "traceparent", fmt.Sprintf("00-%s-%s-01", callerTrace, callerSpan))
	spans := awaitSpans(t, exp, callerTrace, 3)
	srvSpan := spanNamed(t, spans, serverSpanName)
	st := spanNamed(t, spans, storeSpanName)
	run := spanNamed(t, spans, redisBatchSpanName)
	if st.Parent.SpanID() != srvSpan.SpanContext.SpanID() || run.Parent.SpanID() != st.SpanContext.SpanID() {
		t.Errorf("parents: store %v (want server %v), program run %v (want store %v)",
			st.Parent.SpanID(), srvSpan.SpanContext.SpanID(), run.Parent.SpanID(), st.SpanContext.SpanID())
	}
	if run.SpanKind != trace.SpanKindClient {
		t.Errorf("program run span kind %v, want client", run.SpanKind)
	}
	wantAttrs(t, run,
		attribute.String("db.system.name", "redis"),
		attribute.String("envoy_rls.program", "rate-batch-v2.lua"),
		attribute.Int("envoy_rls.group_size", 1),
		attribute.StringSlice("envoy_rls.policies", []string{appPolicy}),
		attribute.String("envoy_rls.outcome", "allowed"),
		attribute.Bool("envoy_rls.committed", true))
	for _, kv := range run.Attributes {
		if strings.HasPrefix(string(kv.Key), "db.") && kv.Key != "db.system.name" && kv.Key != "db.operation.name" {
			t.Errorf("program run span records %s = %q", kv.Key, kv.Value.Emit())
		}
	}

	// Redis paused: the run fails, the spans say so by category.
	srv.Pause()
	r.check(t, user, "traceparent", fmt.Sprintf("00-%s-%s-01", b3Trace, b3Span))
	srv.Resume()
	failed := awaitSpans(t, exp, b3Trace, 3)
	frun := spanNamed(t, failed, redisBatchSpanName)
	if v, _ := attr(frun, "envoy_rls.outcome"); v.AsString() == "allowed" || v.AsString() == "denied" {
		t.Errorf("program run while Redis is paused: outcome %q, want a failure", v.AsString())
	}
	if frun.Status.Code.String() != "Error" {
		t.Errorf("program run while Redis is paused: status %v, want Error", frun.Status)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	noRawValues(t, exp.GetSpans(), user)
}

// keptSpans is an in-memory exporter whose spans outlive the tracer
// provider's shutdown (tracetest's forgets them), and that records the
// shutdown.
type keptSpans struct {
	*tracetest.InMemoryExporter
	shutdown atomic.Bool
}

func newKeptSpans() *keptSpans { return &keptSpans{InMemoryExporter: tracetest.NewInMemoryExporter()} }

func (k *keptSpans) Shutdown(context.Context) error {
	k.shutdown.Store(true)
	return nil
}

var _ sdktrace.SpanExporter = (*keptSpans)(nil)
