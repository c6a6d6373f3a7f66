// Package refmetrics exports the reference service's (envoyproxy/ratelimit's)
// metrics for Prometheus, as that service does with USE_PROMETHEUS: its
// statsd stat names (the names of the statsd sink, internal/statsd) turned
// into Prometheus names and labels by its default mapping or by a
// statsd_exporter mapping file (mapping.go), on a registry and an HTTP
// handler of their own.
//
// A Sink is an rls.Observer. Stat names come from the configured rules
// only (descriptors.Rule.StatKey: domain, keys and configured values),
// never from request values, so every label value is configuration; the
// stat keys (MaxStatKeys) and the series (MaxSeries) are bounded, and a stat
// beyond the bounds is counted in the dropped counter instead. A Sink is
// safe for concurrent use.
package refmetrics

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/internal/statsd"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Bounds.
const (
	// MaxStatKeys bounds the rules counted; the hits of further rules are
	// counted under statsd.OverflowStat.
	MaxStatKeys = statsd.MaxRules
	// MaxSeries bounds the series exported.
	MaxSeries = 20_000
)

// Stat names of the rule loads (the reference's; the statsd sink does not
// send them).
const (
	ConfigLoadSuccessStat = "ratelimit.service.config_load_success"
	ConfigLoadErrorStat   = "ratelimit.service.config_load_error"
)

// Reasons a stat is not exported (the dropped counter's reason label).
const (
	DropSeriesLimit  = "series_limit"
	DropInvalidName  = "invalid_name"
	DropTypeConflict = "type_conflict"
)

// defaultHelp is the help of a series whose mapping gives none.
const defaultHelp = "envoyproxy/ratelimit's stat, as its statsd_exporter mapping exports it."

// Config configures a Sink.
type Config struct {
	// Mapper maps the stat names. (Required)
	Mapper *Mapper
	// NearLimitRatio sets near_limit as for statsd (statsd.Count).
	// (Optional, default statsd.DefaultNearLimitRatio)
	NearLimitRatio float64
	// Dropped counts the stats not exported, by reason (one label).
	// (Optional)
	Dropped *prometheus.CounterVec
}

// ruleSeries are the counters of one stat key, indexed like
// statsd.RuleStats; done[i] says c[i] was resolved (nil: not exported).
type ruleSeries struct {
	c    [len(statsd.RuleStats)]prometheus.Counter
	done [len(statsd.RuleStats)]bool
}

// Sink counts observations into the mapped series.
type Sink struct {
	mapper  *Mapper
	ratio   float64
	dropped *prometheus.CounterVec
	reg     *prometheus.Registry

	mu     sync.RWMutex
	rules  map[string]*ruleSeries
	series map[string]prometheus.Collector // by name and labels
	kinds  map[string]Kind                 // by metric name
	help   map[string]string               // by metric name

	// Series of the calls and the rule loads; nil when not exported.
	requests, redisErrors, serviceErrors, loadOK, loadError, overflow prometheus.Counter
	responseTime                                                      prometheus.Histogram
}

var (
	_ rls.Observer         = (*Sink)(nil)
	_ prometheus.Collector = (*Sink)(nil)
)

// New returns a Sink whose per-call and rule-load series exist (at 0)
// from the start.
func New(cfg Config) (*Sink, error) {
	if cfg.Mapper == nil {
		return nil, fmt.Errorf("refmetrics: no mapper")
	}
	if cfg.NearLimitRatio == 0 {
		cfg.NearLimitRatio = statsd.DefaultNearLimitRatio
	}
	if !(cfg.NearLimitRatio > 0 && cfg.NearLimitRatio <= 1) {
		return nil, fmt.Errorf("refmetrics: near-limit ratio %v is not in (0, 1]", cfg.NearLimitRatio)
	}
	s := &Sink{
		mapper: cfg.Mapper, ratio: cfg.NearLimitRatio, dropped: cfg.Dropped, reg: prometheus.NewRegistry(),
		rules: map[string]*ruleSeries{}, series: map[string]prometheus.Collector{},
		kinds: map[string]Kind{}, help: map[string]string{},
	}
	s.requests = s.counter(statsd.TotalRequestsStat)
	s.redisErrors = s.counter(statsd.RedisErrorStat)
	s.serviceErrors = s.counter(statsd.ServiceErrorStat)
	s.loadOK = s.counter(ConfigLoadSuccessStat)
	s.loadError = s.counter(ConfigLoadErrorStat)
	if h, ok := s.collector(statsd.ResponseTimeStat, Timer).(prometheus.Histogram); ok {
		s.responseTime = h
	}
	if err := s.reg.Register(s); err != nil {
		return nil, fmt.Errorf("refmetrics: %w", err)
	}
	return s, nil
}

// Handler serves the series in the Prometheus exposition formats.
func (s *Sink) Handler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Gatherer is the Sink's registry (for tests and embedding).
func (s *Sink) Gatherer() prometheus.Gatherer { return s.reg }

// ObserveLimit counts one limit of a call under its rule's stat key
// (statsd.Count).
func (s *Sink) ObserveLimit(o rls.LimitObservation) {
	if o.Rule == nil || o.Rule.StatKey == "" || o.Hits <= 0 {
		return
	}
	counts := statsd.Count(o, s.ratio)
	key := o.Rule.StatKey
	var added [len(counts)]bool
	missing := false
	s.mu.RLock()
	rs := s.rules[key]
	for i, v := range counts {
		switch {
		case v == 0:
		case rs == nil || !rs.done[i]:
			missing = true
		default:
			added[i] = true
			if rs.c[i] != nil {
				rs.c[i].Add(float64(v))
			}
		}
	}
	s.mu.RUnlock()
	if !missing {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs = s.rules[key]; rs == nil {
		if len(s.rules) >= MaxStatKeys {
			if s.overflow == nil {
				s.overflow = s.counterLocked(statsd.OverflowStat)
			}
			if s.overflow != nil {
				s.overflow.Add(float64(counts[0]))
			}
			return
		}
		rs = &ruleSeries{}
		s.rules[key] = rs
	}
	prefix := statsd.RulePrefix + statsd.SanitizeName(key) + "."
	for i, v := range counts {
		if v == 0 || added[i] {
			continue
		}
		if !rs.done[i] {
			rs.c[i], _ = s.collectorLocked(prefix+statsd.RuleStats[i], Counter).(prometheus.Counter)
			rs.done[i] = true
		}
		if rs.c[i] != nil {
			rs.c[i].Add(float64(v))
		}
	}
}

// ObserveCall counts one call: total_requests and its response time;
// redis_error when the store failed for one of its limits, service_error
// when it was answered with an error status.
func (s *Sink) ObserveCall(o rls.CallObservation) {
	add(s.requests)
	if o.StoreFailed {
		add(s.redisErrors)
	}
	if o.Code != codes.OK {
		add(s.serviceErrors)
	}
	if s.responseTime != nil {
		s.responseTime.Observe(o.Duration.Seconds())
	}
}

// ConfigLoad counts one rule load: config_load_success or
// config_load_error.
func (s *Sink) ConfigLoad(ok bool) {
	if ok {
		add(s.loadOK)
	} else {
		add(s.loadError)
	}
}

func add(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

// Describe sends nothing: the series follow the mapping and the rules (an
// unchecked collector).
func (s *Sink) Describe(chan<- *prometheus.Desc) {}

// Collect sends every series.
func (s *Sink) Collect(ch chan<- prometheus.Metric) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, c := range s.series {
		c.Collect(ch)
	}
}

// counter is the counter of a stat, nil when it is not exported.
func (s *Sink) counter(stat string) prometheus.Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counterLocked(stat)
}

func (s *Sink) counterLocked(stat string) prometheus.Counter {
	c, _ := s.collectorLocked(stat, Counter).(prometheus.Counter)
	return c
}

func (s *Sink) collector(stat string, kind Kind) prometheus.Collector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.collectorLocked(stat, kind)
}

// collectorLocked finds or makes the series of a stat; nil when the
// mapping drops it or it cannot be exported (counted as dropped).
func (s *Sink) collectorLocked(stat string, kind Kind) prometheus.Collector {
	se, ok := s.mapper.Map(stat, kind)
	if !ok {
		return nil
	}
	if !se.Valid() {
		s.drop(DropInvalidName)
		return nil
	}
	id := seriesID(se)
	if c, ok := s.series[id]; ok {
		if s.kinds[se.Name] == kind {
			return c
		}
		s.drop(DropTypeConflict)
		return nil
	}
	if k, ok := s.kinds[se.Name]; ok && k != kind {
		s.drop(DropTypeConflict)
		return nil
	}
	if len(s.series) >= MaxSeries {
		s.drop(DropSeriesLimit)
		return nil
	}
	help, ok := s.help[se.Name]
	if !ok {
		help = se.Help
		if help == "" {
			help = defaultHelp
		}
		s.help[se.Name] = help
		s.kinds[se.Name] = kind
	}
	var c prometheus.Collector
	if kind == Timer {
		c = prometheus.NewHistogram(prometheus.HistogramOpts{Name: se.Name, Help: help, ConstLabels: se.Labels, Buckets: prometheus.DefBuckets})
	} else {
		c = prometheus.NewCounter(prometheus.CounterOpts{Name: se.Name, Help: help, ConstLabels: se.Labels})
	}
	s.series[id] = c
	return c
}

func (s *Sink) drop(reason string) {
	if s.dropped != nil {
		s.dropped.WithLabelValues(reason).Inc()
	}
}

// seriesID identifies a series: its name and its labels in name order.
func seriesID(se Series) string {
	names := make([]string, 0, len(se.Labels))
	for k := range se.Labels {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(se.Name)
	for _, k := range names {
		b.WriteString("\xff" + k + "\xfe" + se.Labels[k])
	}
	return b.String()
}
