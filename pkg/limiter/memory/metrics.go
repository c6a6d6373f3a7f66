package memory

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsNamespace prefixes the store's metric names, as it does every
// metric of the service (envoy_rls_*).
const metricsNamespace = "envoy_rls"

// Metrics counts what a Store refuses and drops, and how many states it
// holds, as Prometheus collectors. It implements Observer; pass it as
// Config.Observer and call Entries after each Sweep. Safe for concurrent
// use.
type Metrics struct {
	refused prometheus.Counter
	expired prometheus.Counter
	entries prometheus.Gauge
}

var _ Observer = (*Metrics)(nil)

// NewMetrics creates the collectors and registers them on reg:
// envoy_rls_memory_refused_total, envoy_rls_memory_expired_total and
// envoy_rls_memory_entries.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("memory: metrics: a registerer is required")
	}
	m := &Metrics{
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "memory_refused_total",
			Help: "Memory store evaluations refused because the entry bound was reached.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "memory_expired_total",
			Help: "Memory store entries removed after their TTL.",
		}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "memory_entries",
			Help: "Entries held by the memory store.",
		}),
	}
	for _, c := range []prometheus.Collector{m.refused, m.expired, m.entries} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("memory: registering metrics: %w", err)
		}
	}
	return m, nil
}

// Refused counts one new subject refused at the entry bound.
func (m *Metrics) Refused() { m.refused.Inc() }

// Expired counts n expired states dropped.
func (m *Metrics) Expired(n int) { m.expired.Add(float64(n)) }

// Entries sets the number of states held (Store.Len).
func (m *Metrics) Entries(n int) { m.entries.Set(float64(n)) }
