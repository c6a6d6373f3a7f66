package observe

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// NewTop builds the top consumers tracker of cfg and registers its metrics
// on reg: envoy_rls_top_untracked_total and, when metricSeries > 0, the
// heaviest subjects as at most that many envoy_rls_top_subject_hits series.
func NewTop(cfg topk.Config, metricSeries int, reg prometheus.Registerer) (*topk.Tracker, error) {
	t, err := topk.New(cfg)
	if err != nil {
		return nil, err
	}
	untracked := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: rls.MetricsNamespace, Name: "top_untracked_total",
		Help: "Limit decisions left out of /v1/top and /v1/usage because --top-max-policies policies were already tracked.",
	}, func() float64 { return float64(t.Untracked()) })
	if err := reg.Register(untracked); err != nil {
		return nil, fmt.Errorf("registering %s_top_untracked_total: %w", rls.MetricsNamespace, err)
	}
	if metricSeries > 0 {
		if err := reg.Register(&topCollector{t: t, n: metricSeries}); err != nil {
			return nil, fmt.Errorf("registering %s_top_subject_hits: %w", rls.MetricsNamespace, err)
		}
	}
	return t, nil
}

// topObserver feeds the tracker from the decision path.
type topObserver struct{ t *topk.Tracker }

var _ rls.Observer = topObserver{}

func (o topObserver) ObserveLimit(l rls.LimitObservation) {
	r := l.Rule
	if r == nil || r.Policy == nil {
		return
	}
	o.t.Record(topk.Observation{
		Domain: r.Domain, Policy: r.Policy.ID(), Key: r.Key,
		Subject: l.Subject, Hits: l.Hits,
		Denied: l.Over && !l.Shadow, ShadowDenied: l.Over && l.Shadow,
	})
}

func (topObserver) ObserveCall(rls.CallObservation) {}

// WithTop returns o (nil: none) with the top consumers tracker t added.
func WithTop(o rls.Observer, t *topk.Tracker) rls.Observer {
	if o == nil {
		return topObserver{t}
	}
	return observers{o, topObserver{t}}
}

// Join is one observer for all of os that are not nil: nil when none is.
func Join(os ...rls.Observer) rls.Observer {
	var out observers
	for _, o := range os {
		if o != nil {
			out = append(out, o)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}

// observers sends every observation to each of its members.
type observers []rls.Observer

func (os observers) ObserveLimit(l rls.LimitObservation) {
	for _, o := range os {
		o.ObserveLimit(l)
	}
}

func (os observers) ObserveCall(c rls.CallObservation) {
	for _, o := range os {
		o.ObserveCall(c)
	}
}

// topCollector exports the n heaviest subjects of all policies as gauges,
// computed at each scrape: at most n series, labelled by domain, policy
// and the digest's first 8 hex characters.
type topCollector struct {
	t *topk.Tracker
	n int
}

var topSubjectDesc = prometheus.NewDesc(rls.MetricsNamespace+"_top_subject_hits",
	"Hits (cost-weighted) of the heaviest subjects over the top window (--top-metric-series of them in all), by domain, policy ID and subject digest prefix.",
	[]string{"domain", "policy", "subject"}, nil)

func (c *topCollector) Describe(ch chan<- *prometheus.Desc) { ch <- topSubjectDesc }

func (c *topCollector) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		domain, policy, subject string
		hits                    int64
	}
	var all []series
	for _, p := range c.t.Top(topk.Filter{}, topk.ByHits, c.n) {
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
		ch <- prometheus.MustNewConstMetric(topSubjectDesc, prometheus.GaugeValue, float64(x.hits), x.domain, x.policy, x.subject)
	}
}
