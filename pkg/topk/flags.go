package topk

import (
	"cmp"
	"encoding/hex"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// maxMetricSeries bounds --top-metric-series.
const maxMetricSeries = 1000

// Flags are the --top-* flags of the serve command (a group of its
// options, internal/options): the tracker behind /v1/top and /v1/usage,
// and its metric series.
type Flags struct {
	Config
	// MetricSeries is how many of the heaviest subjects are exported as
	// envoy_rls_top_subject_hits series; 0: none.
	MetricSeries int
}

// flagAccepts says what each flag takes. Read only.
var flagAccepts = map[string]string{
	"top-counters":      fmt.Sprintf("an integer from 1 to %d", maxCounters),
	"top-max-policies":  fmt.Sprintf("an integer from 1 to %d", maxPolicies),
	"top-window":        "a duration of at least 1s, such as 1m",
	"top-metric-series": fmt.Sprintf("an integer from 0 to %d", maxMetricSeries),
}

// Define defines the flags on fs.
func (f *Flags) Define(fs *flag.FlagSet) map[string]string {
	fs.IntVar(&f.Counters, "top-counters", defaultCounters, fmt.Sprintf("top consumers: subjects monitored per policy, per ranking (hits, denials) and window, 1–%d (/v1/top answers at most this many)", maxCounters))
	fs.IntVar(&f.MaxPolicies, "top-max-policies", defaultMaxPolicies, fmt.Sprintf("top consumers and usage: the most policies tracked, 1–%d; decisions of further policies are counted in envoy_rls_top_untracked_total only", maxPolicies))
	fs.DurationVar(&f.Window, "top-window", defaultWindow, "top consumers: the length of each of the two rotating windows; /v1/top covers the current and the previous one (at least 1s)")
	fs.IntVar(&f.MetricSeries, "top-metric-series", 0, fmt.Sprintf("export the heaviest subjects as envoy_rls_top_subject_hits, at most this many series in all, 0–%d (0: off); labels carry an 8-hex digest prefix, never a value", maxMetricSeries))
	return nil
}

// Check refuses, one error each, the values Start would.
func (f *Flags) Check(check func(string, bool, string), _ func(string) string) {
	bad := func(name string, ok bool) { check(name, ok, "must be "+flagAccepts[name]) }
	bad("top-counters", f.Counters >= 1 && f.Counters <= maxCounters)
	bad("top-max-policies", f.MaxPolicies >= 1 && f.MaxPolicies <= maxPolicies)
	bad("top-window", f.Window >= time.Second)
	bad("top-metric-series", f.MetricSeries >= 0 && f.MetricSeries <= maxMetricSeries)
}

// Start builds the tracker of the checked f and registers its metrics on
// reg: envoy_rls_top_untracked_total and, when f.MetricSeries > 0, the
// heaviest subjects as at most that many envoy_rls_top_subject_hits
// series.
func Start(f *Flags, reg prometheus.Registerer) (*Tracker, error) {
	t, err := New(f.Config)
	if err != nil {
		return nil, err
	}
	untracked := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "envoy_rls_top_untracked_total",
		Help: "Limit decisions left out of /v1/top and /v1/usage because --top-max-policies policies were already tracked.",
	}, func() float64 { return float64(t.Untracked()) })
	if err := reg.Register(untracked); err != nil {
		return nil, fmt.Errorf("registering envoy_rls_top_untracked_total: %w", err)
	}
	if f.MetricSeries > 0 {
		if err := reg.Register(&collector{t: t, n: f.MetricSeries}); err != nil {
			return nil, fmt.Errorf("registering envoy_rls_top_subject_hits: %w", err)
		}
	}
	return t, nil
}

// collector exports the n heaviest subjects of all policies as gauges,
// computed at each scrape: at most n series, labelled by domain, policy
// and the digest's first 8 hex characters.
type collector struct {
	t *Tracker
	n int
}

var subjectDesc = prometheus.NewDesc("envoy_rls_top_subject_hits",
	"Hits (cost-weighted) of the heaviest subjects over the top window (--top-metric-series of them in all), by domain, policy ID and subject digest prefix.",
	[]string{"domain", "policy", "subject"}, nil)

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- subjectDesc }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		domain, policy, subject string
		hits                    int64
	}
	var all []series
	for _, p := range c.t.Top(Filter{}, ByHits, c.n) {
		for _, e := range p.Entries {
			all = append(all, series{p.Domain, p.Policy, hex.EncodeToString(e.Subject[:4]), e.Hits})
		}
	}
	slices.SortStableFunc(all, func(a, b series) int { return cmp.Compare(b.hits, a.hits) })
	seen := map[[3]string]bool{}
	for _, x := range all {
		if len(seen) == c.n {
			break
		}
		// Two digests of one policy sharing a prefix: keep the heavier.
		k := [3]string{x.domain, x.policy, x.subject}
		if seen[k] {
			continue
		}
		seen[k] = true
		ch <- prometheus.MustNewConstMetric(subjectDesc, prometheus.GaugeValue, float64(x.hits), x.domain, x.policy, x.subject)
	}
}
