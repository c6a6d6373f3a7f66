package options

import (
	"flag"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// topOptions are the --top-* flags (part of Options): the top consumers
// and usage sketches behind /v1/top and /v1/usage.
type topOptions struct {
	TopCounters     int
	TopMaxPolicies  int
	TopWindow       time.Duration
	TopMetricSeries int
}

// MaxTopMetricSeries bounds --top-metric-series.
const MaxTopMetricSeries = 1000

// topFlags adds the --top-* flags to fs.
func topFlags(fs *flag.FlagSet, o *topOptions) {
	fs.IntVar(&o.TopCounters, "top-counters", topk.DefaultCounters, fmt.Sprintf("top consumers: subjects monitored per policy, per ranking (hits, denials) and window, 1–%d (/v1/top answers at most this many)", topk.MaxCounters))
	fs.IntVar(&o.TopMaxPolicies, "top-max-policies", topk.DefaultMaxPolicies, fmt.Sprintf("top consumers and usage: the most policies tracked, 1–%d; decisions of further policies are counted in envoy_rls_top_untracked_total only", topk.MaxPolicies))
	fs.DurationVar(&o.TopWindow, "top-window", topk.DefaultWindow, "top consumers: the length of each of the two rotating windows; /v1/top covers the current and the previous one (at least 1s)")
	fs.IntVar(&o.TopMetricSeries, "top-metric-series", 0, fmt.Sprintf("export the heaviest subjects as envoy_rls_top_subject_hits, at most this many series in all, 0–%d (0: off); labels carry an 8-hex digest prefix, never a value", MaxTopMetricSeries))
}

// topAccepts says what each --top-* flag takes. Read only.
var topAccepts = map[string]string{
	"top-counters":      fmt.Sprintf("an integer from 1 to %d", topk.MaxCounters),
	"top-max-policies":  fmt.Sprintf("an integer from 1 to %d", topk.MaxPolicies),
	"top-window":        "a duration of at least 1s, such as 1m",
	"top-metric-series": fmt.Sprintf("an integer from 0 to %d", MaxTopMetricSeries),
}

// check validates the --top-* flags, one error per refused value.
func (o *topOptions) check(given map[string]Given) error {
	r := refusals{given: given, accepts: topAccepts}
	r.check("top-counters", o.TopCounters >= 1 && o.TopCounters <= topk.MaxCounters)
	r.check("top-max-policies", o.TopMaxPolicies >= 1 && o.TopMaxPolicies <= topk.MaxPolicies)
	r.check("top-window", o.TopWindow >= time.Second)
	r.check("top-metric-series", o.TopMetricSeries >= 0 && o.TopMetricSeries <= MaxTopMetricSeries)
	return r.err()
}

// TopConfig is the tracker's configuration of the --top-* flags.
func (o *topOptions) TopConfig() topk.Config {
	return topk.Config{Counters: o.TopCounters, MaxPolicies: o.TopMaxPolicies, Window: o.TopWindow}
}
