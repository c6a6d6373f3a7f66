package denycache

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts cache hits as a Prometheus counter,
// envoy_rls_local_cache_hits_total. It implements Observer; pass it as
// Config.Observer. Safe for concurrent use.
type Metrics struct {
	hits prometheus.Counter
}

var _ observer = (*Metrics)(nil)

// NewMetrics creates the counter and registers it on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("denycache: metrics: a registerer is required")
	}
	m := &Metrics{hits: prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "envoy_rls", Name: "local_cache_hits_total",
		Help: "Limit decisions answered by the local deny cache (a store denial repeated until its retry time) instead of the store.",
	})}
	if err := reg.Register(m.hits); err != nil {
		return nil, fmt.Errorf("denycache: registering metrics: %w", err)
	}
	return m, nil
}

// Hits counts n limit decisions answered from the cache.
func (m *Metrics) Hits(n int) { m.hits.Add(float64(n)) }
