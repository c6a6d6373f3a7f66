package redis

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Redis store's group-commit histograms. Build them with
// NewMetrics and pass them in Config.Metrics.
type Metrics struct {
	size prometheus.Histogram
	wait prometheus.Histogram
}

// NewMetrics creates the collectors and registers them on reg:
// envoy_rls_redis_group_requests (the Envoy requests evaluated by one program
// run) and envoy_rls_redis_group_wait_seconds (how long a request waited in
// its slot's queue before its run was sent: 0 when it was sent at once).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("redis store: metrics: a registerer is required")
	}
	m := &Metrics{
		size: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "envoy_rls", Name: "redis_group_requests",
			Help:    "Envoy requests evaluated together by one Redis program run (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "envoy_rls", Name: "redis_group_wait_seconds",
			Help:    "Time an Envoy request waited for the program run of its group to be sent (0 when sent at once).",
			Buckets: []float64{0, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3},
		}),
	}
	for _, c := range []prometheus.Collector{m.size, m.wait} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("redis store: registering metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one run of the groups gs.
func (m *Metrics) observe(gs []*group) {
	var now time.Time
	for _, g := range gs {
		if g.queued.IsZero() {
			m.wait.Observe(0)
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		m.wait.Observe(now.Sub(g.queued).Seconds())
	}
	m.size.Observe(float64(len(gs)))
}
