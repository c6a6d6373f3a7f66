package app

import (
	"fmt"
	"time"

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
	// lastReload is the Unix time of the last successful rule load (0
	// before the first).
	lastReload prometheus.Gauge
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
	m.lastReload = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: rls.MetricsNamespace, Name: "config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful rule load (the first load included; 0 before it).",
	})
	if err := reg.Register(m.lastReload); err != nil {
		return nil, fmt.Errorf("registering %s_config_last_reload_success_timestamp_seconds: %w", rls.MetricsNamespace, err)
	}
	// Both series exist from the start.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return &m, nil
}

// reload counts one rule load attempt, made at now.
func (m *metrics) reload(ok bool, now time.Time) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.lastReload.Set(float64(now.UnixMilli()) / 1e3)
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
}
