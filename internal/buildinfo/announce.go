package buildinfo

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Announce logs the running build once and exports it as the constant
// gauge envoy_rls_build_info{version,revision,goversion} 1 on reg, so a
// dashboard can tell which release each replica runs.
func Announce(log *zap.Logger, reg prometheus.Registerer) error {
	in := Get()
	log.Info("envoy-rls build",
		zap.String("version", in.Version),
		zap.String("revision", in.Revision),
		zap.String("go_version", in.GoVersion),
		zap.String("build_date", in.Date),
		zap.Bool("modified", in.Modified))
	return register(reg, in)
}

func register(reg prometheus.Registerer, in Info) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "envoy_rls_build_info",
		Help: "Always 1; the labels say which build is running (version, VCS revision, Go toolchain).",
		ConstLabels: prometheus.Labels{
			"version":   in.Version,
			"revision":  in.Revision,
			"goversion": in.GoVersion,
		},
	})
	g.Set(1)
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("registering envoy_rls_build_info: %w", err)
	}
	return nil
}
