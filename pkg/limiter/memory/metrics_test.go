package memory_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestMetrics: as a store's Observer, Metrics counts refusals, expiries
// and overflow decisions
// under the names docs/observe.md lists.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := memory.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 1, Shards: 1, Observer: m})
	p := fixedPolicy(t, 5, time.Second)
	if o := eval1(s, context.Background(), limiter.Request{Policy: p, Subject: subject(0), Cost: 1}); !o.Decision.Allowed {
		t.Fatalf("first subject: %+v", o)
	}
	if o := eval1(s, context.Background(), limiter.Request{Policy: p, Subject: subject(1), Cost: 1}); o.Decision.Source != limiter.SourceMemoryOverflow {
		t.Fatalf("second subject on a full store: %+v", o)
	}
	m.Entries(s.Len())
	m.Sketches(s.Sketches())
	m.SketchBytes(s.SketchBytes())
	want := `
# HELP envoy_rls_memory_entries Entries held by the memory store.
# TYPE envoy_rls_memory_entries gauge
envoy_rls_memory_entries 1
# HELP envoy_rls_memory_expired_total Memory store entries removed after their TTL.
# TYPE envoy_rls_memory_expired_total counter
envoy_rls_memory_expired_total 0
# HELP envoy_rls_memory_overflow_decisions_total Memory store decisions made by a policy's overflow sketch (a new subject without room for an exact entry).
# TYPE envoy_rls_memory_overflow_decisions_total counter
envoy_rls_memory_overflow_decisions_total{policy="test"} 1
# HELP envoy_rls_memory_overflow_sketch_bytes Memory held by the memory store's overflow sketches, in bytes.
# TYPE envoy_rls_memory_overflow_sketch_bytes gauge
envoy_rls_memory_overflow_sketch_bytes 131072
# HELP envoy_rls_memory_overflow_sketches Overflow sketches held by the memory store (one per policy in overflow).
# TYPE envoy_rls_memory_overflow_sketches gauge
envoy_rls_memory_overflow_sketches 1
# HELP envoy_rls_memory_refused_total Memory store evaluations refused because there was no room for a new subject and every overflow sketch was in use, or no room for a new lease set in its concurrency policy's share.
# TYPE envoy_rls_memory_refused_total counter
envoy_rls_memory_refused_total 0
`
	if got := limitertest.Exposition(t, reg); got != strings.TrimPrefix(want, "\n") {
		t.Fatalf("exposed:\n%s\nwant:\n%s", got, want)
	}
	// A refusal of a configured policy and one of an override group.
	m.Refused(p)
	m.Refused(limitertest.Policy(t, limiter.PolicySpec{ID: "edge:override:hour/k", Group: "edge:override",
		Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Hour}}))
	want = strings.Replace(want, "envoy_rls_memory_refused_total 0", "envoy_rls_memory_refused_total 1", 1)
	want = strings.Replace(want, "# HELP envoy_rls_memory_refused_total", `# HELP envoy_rls_memory_override_refused_total Memory store evaluations of request-supplied limit overrides refused because the overrides' share of the store and of the overflow sketches was in use, by group (<domain>:override).
# TYPE envoy_rls_memory_override_refused_total counter
envoy_rls_memory_override_refused_total{policy="edge:override"} 1
# HELP envoy_rls_memory_refused_total`, 1)
	if got := limitertest.Exposition(t, reg); got != strings.TrimPrefix(want, "\n") {
		t.Fatalf("exposed:\n%s\nwant:\n%s", got, want)
	}
	clock.Set(time.UnixMilli(t0 + 10_000))
	s.Sweep(clock.Now())
	m.Entries(s.Len())
	m.Sketches(s.Sketches())
	m.SketchBytes(s.SketchBytes())
	want = strings.NewReplacer("entries 1", "entries 0", "expired_total 0", "expired_total 1", "sketches 1", "sketches 0",
		"sketch_bytes 131072", "sketch_bytes 0").Replace(want)
	if got := limitertest.Exposition(t, reg); got != strings.TrimPrefix(want, "\n") {
		t.Fatalf("exposed:\n%s\nwant:\n%s", got, want)
	}
}

func TestNewMetricsErrors(t *testing.T) {
	if _, err := memory.NewMetrics(nil); err == nil {
		t.Fatal("nil registerer: no error")
	}
	reg := prometheus.NewRegistry()
	if _, err := memory.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := memory.NewMetrics(reg); err == nil || !strings.Contains(err.Error(), "memory: registering metrics") {
		t.Fatalf("second registration on one registry: %v", err)
	}
}
