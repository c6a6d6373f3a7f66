package refmetrics

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// DefaultPath is where the reference's metrics are served on
// --reference-metrics-addr (the reference's PROMETHEUS_PATH default).
const DefaultPath = "/metrics"

// maxPath bounds --reference-metrics-path.
const maxPath = 256

// Flags are the --reference-metrics-* flags of the serve command
// (options.Group): the reference service's Prometheus metrics on a
// listener of their own.
type Flags struct {
	Addr    string
	Path    string
	Mapping string
}

// flagAccepts says what each flag takes. Read only.
var flagAccepts = map[string]string{
	"reference-metrics-addr":    "[host]:port, or empty for no reference metrics listener",
	"reference-metrics-path":    fmt.Sprintf("an absolute URL path such as /metrics, at most %d bytes", maxPath),
	"reference-metrics-mapping": "set only with --reference-metrics-addr",
}

// Define defines the flags on fs.
func (f *Flags) Define(fs *flag.FlagSet) map[string]string {
	fs.StringVar(&f.Addr, "reference-metrics-addr", "", "serve envoyproxy/ratelimit's Prometheus metrics (ratelimit_service_rate_limit_total_hits{domain,key1} and the others of its statsd_exporter mapping, docs/observe.md) on this listen address, beside envoy-rls's own /metrics on the admin port (empty: off; the reference's USE_PROMETHEUS and PROMETHEUS_ADDR)")
	fs.StringVar(&f.Path, "reference-metrics-path", DefaultPath, "the path of those metrics on --reference-metrics-addr (the reference's PROMETHEUS_PATH)")
	fs.StringVar(&f.Mapping, "reference-metrics-mapping", "", "statsd_exporter mapping file that names those metrics (the reference's PROMETHEUS_MAPPER_YAML; empty: the reference's default mapping); read at start, a file that does not load stops it")
	return nil
}

// Check refuses, one error each, the values that cannot work, without
// reading the mapping file.
func (f *Flags) Check(check func(string, bool, string), _ func(string) string) {
	bad := func(name string, ok bool) { check(name, ok, "must be "+flagAccepts[name]) }
	if f.Addr != "" {
		_, port, err := net.SplitHostPort(f.Addr)
		p, perr := strconv.Atoi(port)
		bad("reference-metrics-addr", err == nil && perr == nil && p >= 0 && p < 65536)
	}
	bad("reference-metrics-path", strings.HasPrefix(f.Path, "/") && len(f.Path) <= maxPath && !strings.ContainsAny(f.Path, " \t\r\n?#"))
	bad("reference-metrics-mapping", f.Mapping == "" || f.Addr != "")
}

// mapper is the mapping of the metrics: the file of
// --reference-metrics-mapping, read now, or the reference's default.
func (f *Flags) mapper(label func(string) string) (*Mapper, error) {
	if f.Mapping == "" {
		return defaultMapper()
	}
	m, err := loadMapping(f.Mapping)
	if err != nil {
		return nil, fmt.Errorf("%s: must be a statsd_exporter mapping file envoy-rls reads (docs/observe.md, Envoy Gateway's Prometheus metrics): %w", label("reference-metrics-mapping"), err)
	}
	return m, nil
}

// Start makes the sink of the checked f when --reference-metrics-addr is
// set, nil otherwise: the mapping file is read here, so that a bad one
// stops the start. ratio is --near-limit-ratio; the counter of the stats
// not exported is registered on reg; label names a flag as the user set
// it.
func Start(f *Flags, ratio float64, reg prometheus.Registerer, label func(string) string) (*Sink, error) {
	if f.Addr == "" {
		return nil, nil
	}
	mapper, err := f.mapper(label)
	if err != nil {
		return nil, err
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: rls.MetricsNamespace, Name: "reference_metrics_dropped_total",
		Help: "Stats not exported on --reference-metrics-addr, by reason: series_limit (the bound on series), invalid_name (a mapping made a name Prometheus refuses), type_conflict (a counter and a histogram mapped to one name).",
	}, []string{"reason"})
	if err := reg.Register(dropped); err != nil {
		return nil, fmt.Errorf("registering %s_reference_metrics_dropped_total: %w", rls.MetricsNamespace, err)
	}
	return New(Config{Mapper: mapper, NearLimitRatio: ratio, Dropped: dropped})
}

// Serve listens on --reference-metrics-addr and serves s's metrics at
// --reference-metrics-path there, in the background. addr is the bound
// address; stop shuts the server down and waits for it. A nil s serves
// nothing.
func (s *Sink) Serve(f *Flags, label func(string) string, log *zap.Logger) (addr string, stop func(), err error) {
	if s == nil {
		return "", func() {}, nil
	}
	lis, err := net.Listen("tcp", f.Addr)
	if err != nil {
		return "", nil, fmt.Errorf("%s: must be an address this process can listen on: %w", label("reference-metrics-addr"), err)
	}
	path, metrics := f.Path, s.Handler()
	// The path is compared as given: it is the user's, not a mux pattern.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != path:
			http.NotFound(w, r)
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		default:
			metrics.ServeHTTP(w, r)
		}
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("reference metrics server stopped", zap.Error(err))
		}
	}()
	return lis.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}
