package failover

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Metrics counts the limits a failure mode answered (Config.Metrics), as
// Prometheus counters: envoy_rls_store_errors_total{outcome}, by the kind
// of the store's failure, and envoy_rls_fallback_total{mode}, by the mode
// that answered (closed, open, local). Safe for concurrent use.
type Metrics struct{ kinds, modes *prometheus.CounterVec }

// NewMetrics creates the counters and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	c := &Metrics{
		kinds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "envoy_rls", Name: "store_errors_total",
			Help: "Store failures by outcome kind (unavailable, indeterminate, incompatible)."}, []string{"outcome"}),
		modes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "envoy_rls", Name: "fallback_total",
			Help: "Decisions answered by a policy's failure mode (open, closed, local) because the store failed."}, []string{"mode"}),
	}
	for _, v := range []*prometheus.CounterVec{c.kinds, c.modes} {
		if err := reg.Register(v); err != nil {
			return nil, fmt.Errorf("failover: registering metrics: %w", err)
		}
	}
	// Every series from the start, at zero.
	for _, k := range []limiter.OutcomeKind{limiter.Unavailable, limiter.Indeterminate, limiter.Incompatible} {
		c.kinds.WithLabelValues(k.String())
	}
	for _, m := range []limiter.FailureMode{limiter.FailClosed, limiter.FailOpen, limiter.FailLocal} {
		c.modes.WithLabelValues(m.String())
	}
	return c, nil
}

// count counts o, a failure mode's answer.
func (c *Metrics) count(o *limiter.Outcome) {
	c.kinds.WithLabelValues(o.Failed.String()).Inc()
	c.modes.WithLabelValues(o.Decision.Fallback.String()).Inc()
}
