package memory

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// metricsNamespace prefixes the store's metric names, as it does every
// metric of the service (envoy_rls_*).
const metricsNamespace = "envoy_rls"

// Metrics counts what a Store refuses and drops, and how many states it
// holds, as Prometheus collectors. It implements Observer; pass it as
// Config.Observer and call Entries after each Sweep. Safe for concurrent
// use.
type Metrics struct {
	refused     prometheus.Counter
	madeRefused *prometheus.CounterVec
	expired     prometheus.Counter
	entries     prometheus.Gauge
	overflow    *prometheus.CounterVec
	sketches    prometheus.Gauge
	sketchBytes prometheus.Gauge
}

var _ observer = (*Metrics)(nil)

// NewMetrics creates the collectors and registers them on reg:
// envoy_rls_memory_refused_total,
// envoy_rls_memory_override_refused_total{policy} (by group),
// envoy_rls_memory_expired_total,
// envoy_rls_memory_entries, envoy_rls_memory_overflow_decisions_total{policy}
// (limiter.Policy.Label: the configured policy IDs, and for the policies made
// at request time their group, a bounded set),
// envoy_rls_memory_overflow_sketches and
// envoy_rls_memory_overflow_sketch_bytes.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("memory: metrics: a registerer is required")
	}
	m := &Metrics{
		refused: newCounter("memory_refused_total",
			"Memory store evaluations refused because there was no room for a new subject and every overflow sketch was in use, or no room for a new lease set in its concurrency policy's share."),
		madeRefused: newPolicyCounter("memory_override_refused_total",
			"Memory store evaluations of request-supplied limit overrides refused because the overrides' share of the store and of the overflow sketches was in use, by group (<domain>:override)."),
		expired: newCounter("memory_expired_total",
			"Memory store entries removed after their TTL."),
		entries: newGauge("memory_entries",
			"Entries held by the memory store."),
		overflow: newPolicyCounter("memory_overflow_decisions_total",
			"Memory store decisions made by a policy's overflow sketch (a new subject without room for an exact entry)."),
		sketches: newGauge("memory_overflow_sketches",
			"Overflow sketches held by the memory store (one per policy in overflow)."),
		sketchBytes: newGauge("memory_overflow_sketch_bytes",
			"Memory held by the memory store's overflow sketches, in bytes."),
	}
	for _, c := range []prometheus.Collector{m.refused, m.madeRefused, m.expired, m.entries, m.overflow, m.sketches, m.sketchBytes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("memory: registering metrics: %w", err)
		}
	}
	return m, nil
}

// newCounter is a counter of the service's namespace.
func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help})
}

// newPolicyCounter is a counter of the service's namespace by policy (a
// limiter.Policy.Label or a group: a bounded set).
func newPolicyCounter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help}, []string{"policy"})
}

// newGauge is a gauge of the service's namespace.
func newGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: name, Help: help})
}

// Refused counts one new subject (or lease set) refused at the entry
// bound: of a configured policy in memory_refused_total, of a policy made
// at request time (an override) in memory_override_refused_total by its
// group.
func (m *Metrics) Refused(p *limiter.Policy) {
	if g := p.Group(); g != "" {
		m.madeRefused.WithLabelValues(g).Inc()
		return
	}
	m.refused.Inc()
}

// Expired counts n expired states dropped.
func (m *Metrics) Expired(n int) { m.expired.Add(float64(n)) }

// Entries sets the number of states held (Store.Len).
func (m *Metrics) Entries(n int) { m.entries.Set(float64(n)) }

// Overflow counts one decision of an overflow sketch, by the policy's label
// (limiter.Policy.Label).
func (m *Metrics) Overflow(label string) { m.overflow.WithLabelValues(label).Inc() }

// Sketches sets the number of overflow sketches held (Store.Sketches).
func (m *Metrics) Sketches(n int) { m.sketches.Set(float64(n)) }

// SketchBytes sets the memory the overflow sketches hold
// (Store.SketchBytes).
func (m *Metrics) SketchBytes(n int64) { m.sketchBytes.Set(float64(n)) }
