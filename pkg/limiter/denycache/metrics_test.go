package denycache

import (
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetrics: Metrics counts hits under the name docs/observe.md lists.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var o observer = m
	o.Hits(2)
	o.Hits(3)
	want := `
# HELP envoy_rls_local_cache_hits_total Limit decisions answered by the local deny cache (a store denial repeated until its retry time) instead of the store.
# TYPE envoy_rls_local_cache_hits_total counter
envoy_rls_local_cache_hits_total 5
`
	if got := limitertest.Exposition(t, reg); got != strings.TrimPrefix(want, "\n") {
		t.Fatalf("exposed:\n%s\nwant:\n%s", got, want)
	}
	if _, err := NewMetrics(nil); err == nil {
		t.Fatal("nil registerer: no error")
	}
	if _, err := NewMetrics(reg); err == nil || !strings.Contains(err.Error(), "denycache: registering metrics") {
		t.Fatalf("second registration on one registry: %v", err)
	}
}
