package app

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// metrics are the collectors serve registers, each built by its owner.
// Every one is registered whatever the store and --local-cache, so that
// dashboards and alerts see a zero instead of a missing series.
type metrics struct {
	rpc     *rls.Metrics
	memory  *memory.Metrics
	cache   *denycache.Metrics
	redis   *redis.Metrics
	reloads *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var m metrics
	var err error
	if m.rpc, err = rls.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.memory, err = memory.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.cache, err = denycache.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.redis, err = redis.NewMetrics(reg); err != nil {
		return nil, err
	}
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: rls.MetricsNamespace, Name: "config_reloads_total",
		Help: "Rule reloads by result (success, failure).",
	}, []string{"result"})
	if err := reg.Register(m.reloads); err != nil {
		return nil, fmt.Errorf("registering %s_config_reloads_total: %w", rls.MetricsNamespace, err)
	}
	// Both series exist from the start.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return &m, nil
}

// reload counts one rule load attempt.
func (m *metrics) reload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
}
