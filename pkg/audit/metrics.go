package audit

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the audit sink's counters.
type metrics struct {
	written    prometheus.Counter
	sampledOut prometheus.Counter
	drops      *prometheus.CounterVec
}

// NewMetrics registers the audit sink's metrics on reg:
// envoy_rls_audit_events_total (written), envoy_rls_audit_dropped_total
// {reason} and envoy_rls_audit_sampled_out_total.
func NewMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "envoy_rls_audit_events_total",
			Help: "Denial events written to the audit sink.",
		}),
		sampledOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "envoy_rls_audit_sampled_out_total",
			Help: "Denial events not written because sampling left them out.",
		}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_audit_dropped_total",
			Help: "Denial events dropped: queue_full (the queue was full), write_failed (the sink refused them), shutdown (still queued when the drain time ended).",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.written, m.sampledOut, m.drops} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("audit: registering metrics: %w", err)
		}
	}
	for _, r := range []string{dropQueueFull, dropWriteFailed, dropShutdown} {
		m.drops.WithLabelValues(r)
	}
	return m, nil
}

func (m *metrics) dropped(reason string, n int) {
	if n > 0 {
		m.drops.WithLabelValues(reason).Add(float64(n))
	}
}
