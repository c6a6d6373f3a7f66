// Package observe wires the service's observability: the logger, the
// Prometheus registry and the collectors serve registers, the build info,
// OpenTelemetry tracing, the statsd and audit sinks, the top consumers
// tracker and the failover store's transition log. Each piece is built
// from values (no flags) and hands the packages what they consume
// (rls.Metrics, an Observer, an Auditor, a tracer provider, a
// failover.Observer).
package observe

import (
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/internal/buildinfo"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Metrics are the collectors serve registers, each built by its owner.
// Every one is registered whatever the store and the deny cache, so that
// dashboards and alerts see a zero instead of a missing series.
type Metrics struct {
	RPC     *rls.Metrics
	reloads *prometheus.CounterVec
	// lastReload is the Unix time of the last successful rule load (0
	// before the first).
	lastReload prometheus.Gauge
	// SecretMismatch is 1 while the key of the HMAC secret shared through
	// Redis holds another value than this replica's secret.
	SecretMismatch prometheus.Gauge
}

// NewMetrics registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	var m Metrics
	var err error
	if m.RPC, err = rls.NewMetrics(reg); err != nil {
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
	m.SecretMismatch = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: rls.MetricsNamespace, Name: "shared_secret_mismatch",
		Help: "1 while the Redis key of the HMAC secret shared through Redis (--hmac-secret-redis-key) holds another value than the secret this replica uses; 0 otherwise, and without a shared secret.",
	})
	if err := reg.Register(m.SecretMismatch); err != nil {
		return nil, fmt.Errorf("registering %s_shared_secret_mismatch: %w", rls.MetricsNamespace, err)
	}
	// Both series exist from the start.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return &m, nil
}

// Reload counts one rule load attempt, made at now.
func (m *Metrics) Reload(ok bool, now time.Time) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.lastReload.Set(float64(now.UnixMilli()) / 1e3)
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
}

// NewRegistry is the registry of one serve, with the Go runtime's and the
// process's collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// AnnounceBuild logs the running build once and exports it as the constant
// gauge envoy_rls_build_info{version,revision,goversion} 1 on reg, so a
// dashboard can tell which release each replica runs.
func AnnounceBuild(log *zap.Logger, reg prometheus.Registerer) error {
	in := buildinfo.Get()
	log.Info("envoy-rls build",
		zap.String("version", in.Version),
		zap.String("revision", in.Revision),
		zap.String("go_version", in.GoVersion),
		zap.String("build_date", in.Date),
		zap.Bool("modified", in.Modified))
	return registerBuildInfo(reg, in)
}

func registerBuildInfo(reg prometheus.Registerer, in buildinfo.Info) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: rls.MetricsNamespace,
		Name:      "build_info",
		Help:      "Always 1; the labels say which build is running (version, VCS revision, Go toolchain).",
		ConstLabels: prometheus.Labels{
			"version":   in.Version,
			"revision":  in.Revision,
			"goversion": in.GoVersion,
		},
	})
	g.Set(1)
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("registering %s_build_info: %w", rls.MetricsNamespace, err)
	}
	return nil
}

// NewLogger is the service's logger: JSON lines on w from level up, with
// RFC 3339 times and durations as text.
func NewLogger(level zapcore.Level, w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w))))
}
