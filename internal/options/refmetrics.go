package options

import (
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/refmetrics"
)

// DefaultReferenceMetricsPath is where the reference's metrics are served
// on --reference-metrics-addr (the reference's PROMETHEUS_PATH default).
const DefaultReferenceMetricsPath = "/metrics"

// maxMetricsPath bounds --reference-metrics-path.
const maxMetricsPath = 256

// refMetricsOptions are the --reference-metrics-* flags (part of Options):
// the reference service's Prometheus metrics on a listener of their own
// (internal/refmetrics).
type refMetricsOptions struct {
	ReferenceMetricsAddr    string
	ReferenceMetricsPath    string
	ReferenceMetricsMapping string
}

// refMetricsFlags adds the --reference-metrics-* flags to fs.
func refMetricsFlags(fs *flag.FlagSet, o *refMetricsOptions) {
	fs.StringVar(&o.ReferenceMetricsAddr, "reference-metrics-addr", "", "serve envoyproxy/ratelimit's Prometheus metrics (ratelimit_service_rate_limit_total_hits{domain,key1} and the others of its statsd_exporter mapping, docs/observe.md) on this listen address, beside envoy-rls's own /metrics on the admin port (empty: off; the reference's USE_PROMETHEUS and PROMETHEUS_ADDR)")
	fs.StringVar(&o.ReferenceMetricsPath, "reference-metrics-path", DefaultReferenceMetricsPath, "the path of those metrics on --reference-metrics-addr (the reference's PROMETHEUS_PATH)")
	fs.StringVar(&o.ReferenceMetricsMapping, "reference-metrics-mapping", "", "statsd_exporter mapping file that names those metrics (the reference's PROMETHEUS_MAPPER_YAML; empty: the reference's default mapping); read at start, a file that does not load stops it")
}

// refMetricsAccepts says what each flag takes. Read only.
var refMetricsAccepts = map[string]string{
	"reference-metrics-addr":    "[host]:port, or empty for no reference metrics listener",
	"reference-metrics-path":    fmt.Sprintf("an absolute URL path such as /metrics, at most %d bytes", maxMetricsPath),
	"reference-metrics-mapping": "set only with --reference-metrics-addr",
}

// check validates the --reference-metrics-* flags, one error per refused
// value.
func (o *refMetricsOptions) check(given map[string]Given) error {
	r := refusals{given: given, accepts: refMetricsAccepts}
	if o.ReferenceMetricsAddr != "" {
		_, port, err := net.SplitHostPort(o.ReferenceMetricsAddr)
		p, perr := strconv.Atoi(port)
		r.check("reference-metrics-addr", err == nil && perr == nil && p >= 0 && p < 65536)
	}
	p := o.ReferenceMetricsPath
	r.check("reference-metrics-path", strings.HasPrefix(p, "/") && len(p) <= maxMetricsPath && !strings.ContainsAny(p, " \t\r\n?#"))
	r.check("reference-metrics-mapping", o.ReferenceMetricsMapping == "" || o.ReferenceMetricsAddr != "")
	return r.err()
}

// ReferenceMapper is the mapping of the reference's metrics: the file of
// --reference-metrics-mapping, read now, or the reference's default.
func (o *Options) ReferenceMapper() (*refmetrics.Mapper, error) {
	if o.ReferenceMetricsMapping == "" {
		return refmetrics.DefaultMapper()
	}
	m, err := refmetrics.LoadMapping(o.ReferenceMetricsMapping)
	if err != nil {
		return nil, fmt.Errorf("%s: must be a statsd_exporter mapping file envoy-rls reads (docs/observe.md, Envoy Gateway's Prometheus metrics): %w", Label("reference-metrics-mapping", o.Given), err)
	}
	return m, nil
}
