package rls

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// MetricsNamespace prefixes every metric name: envoy_rls_*.
const MetricsNamespace = "envoy_rls"

// Label values that stand in for request data. A label never carries a
// descriptor value: domains come from the loaded configuration (or are
// UnknownDomainLabel) and policies are configured policy IDs.
const (
	UnknownDomainLabel = "unknown"
	UnlimitedPolicy    = "unlimited"
	OverridePolicy     = "override"
)

// Decision results, the values of the result label of decisions_total.
const (
	ResultOK              = "ok"
	ResultOverLimit       = "over_limit"
	ResultShadowOverLimit = "shadow_over_limit"
)

// Metrics holds the service's Prometheus collectors. Build it with
// NewMetrics on a registry the caller owns; it is safe for concurrent use.
type Metrics struct {
	decisions    *prometheus.CounterVec
	nearLimit    *prometheus.CounterVec
	unmatched    *prometheus.CounterVec
	storeErrors  *prometheus.CounterVec
	storeLatency prometheus.Histogram
	fallbacks    *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	calls        *prometheus.CounterVec
	callLatency  prometheus.Histogram
	memRefused   prometheus.Counter
	memExpired   prometheus.Counter
	memEntries   prometheus.Gauge
	cacheHits    prometheus.Counter

	// Children resolved once, so that the hot path does not hash label
	// values on every call.
	byCode        [codes.Unauthenticated + 1]prometheus.Counter
	storeErrByKey [limiter.Incompatible + 1]prometheus.Counter
	fallbackBy    [limiter.FailOpen + 1]prometheus.Counter

	mu       sync.RWMutex
	byPolicy map[policyKey]*policyCounters
}

type policyKey struct{ domain, policy string }

type policyCounters struct {
	ok, over, shadowOver, near prometheus.Counter
}

// latencyBuckets span 50µs to about 1.6s.
var latencyBuckets = prometheus.ExponentialBuckets(0.00005, 2, 16)

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("rls: metrics: a registerer is required")
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "decisions_total",
			Help: "Descriptor decisions by configured domain, policy ID and result (ok, over_limit, shadow_over_limit).",
		}, []string{"domain", "policy", "result"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "near_limit_total",
			Help: "Allowed descriptor decisions that left 80% or more of the limit used.",
		}, []string{"domain", "policy"}),
		unmatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "unmatched_total",
			Help: "Descriptors that matched no rule (domain is \"unknown\" when the domain is not configured).",
		}, []string{"domain"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "store_errors_total",
			Help: "Store failures by outcome kind (unavailable, indeterminate, incompatible).",
		}, []string{"outcome"}),
		storeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "store_latency_seconds",
			Help:    "Duration of one Store.Evaluate batch.",
			Buckets: latencyBuckets,
		}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "fallback_total",
			Help: "Decisions answered by a policy's failure mode (open, closed) because the store failed.",
		}, []string{"mode"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "config_reloads_total",
			Help: "Rule reloads by result (success, failure).",
		}, []string{"result"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "calls_total",
			Help: "ShouldRateLimit calls by gRPC status code.",
		}, []string{"code"}),
		callLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "call_latency_seconds",
			Help:    "Duration of ShouldRateLimit calls, in the server.",
			Buckets: latencyBuckets,
		}),
		memRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "memory_refused_total",
			Help: "Memory store evaluations refused because the entry bound was reached.",
		}),
		memExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "memory_expired_total",
			Help: "Memory store entries removed after their TTL.",
		}),
		memEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "memory_entries",
			Help: "Entries held by the memory store.",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "local_cache_hits_total",
			Help: "Limit decisions answered by the local deny cache (a store denial repeated until its retry time) instead of the store.",
		}),
		byPolicy: make(map[policyKey]*policyCounters),
	}
	for _, c := range []prometheus.Collector{
		m.decisions, m.nearLimit, m.unmatched, m.storeErrors, m.storeLatency,
		m.fallbacks, m.reloads, m.calls, m.callLatency, m.memRefused, m.memExpired, m.memEntries,
		m.cacheHits,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: registering metrics: %w", err)
		}
	}
	for c := range m.byCode {
		m.byCode[c] = m.calls.WithLabelValues(codes.Code(c).String())
	}
	for _, k := range []limiter.OutcomeKind{limiter.Unavailable, limiter.Indeterminate, limiter.Incompatible} {
		m.storeErrByKey[k] = m.storeErrors.WithLabelValues(k.String())
	}
	for _, mode := range []limiter.FailureMode{limiter.FailClosed, limiter.FailOpen} {
		m.fallbackBy[mode] = m.fallbacks.WithLabelValues(mode.String())
	}
	// Pre-create the reload series so that dashboards see zeros.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return m, nil
}

// ConfigReload counts one rule reload.
func (m *Metrics) ConfigReload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
}

// MemoryRefused counts memory store evaluations refused at the entry bound.
func (m *Metrics) MemoryRefused() { m.memRefused.Inc() }

// MemoryExpired counts memory store entries removed after their TTL.
func (m *Metrics) MemoryExpired(n int) { m.memExpired.Add(float64(n)) }

// LocalCacheHits counts n limit decisions answered by the local deny cache
// (it satisfies denycache.Observer as Hits).
func (m *Metrics) LocalCacheHits(n int) { m.cacheHits.Add(float64(n)) }

// MemoryEntries sets the number of entries held by the memory store.
func (m *Metrics) MemoryEntries(n int) { m.memEntries.Set(float64(n)) }

func (m *Metrics) observeCall(c codes.Code, d time.Duration) {
	if int(c) < len(m.byCode) {
		m.byCode[c].Inc()
	} else {
		m.calls.WithLabelValues(c.String()).Inc()
	}
	m.callLatency.Observe(d.Seconds())
}

func (m *Metrics) observeStore(d time.Duration) { m.storeLatency.Observe(d.Seconds()) }

func (m *Metrics) storeError(k limiter.OutcomeKind) {
	if int(k) < len(m.storeErrByKey) && m.storeErrByKey[k] != nil {
		m.storeErrByKey[k].Inc()
	}
}

func (m *Metrics) fallback(mode limiter.FailureMode) {
	if int(mode) < len(m.fallbackBy) {
		m.fallbackBy[mode].Inc()
	}
}

func (m *Metrics) unmatchedDescriptor(domain string) {
	m.unmatched.WithLabelValues(domain).Inc()
}

// policy returns the counters of one (domain, policy) pair. Both strings are
// configured values; the set is bounded by the configuration.
func (m *Metrics) policy(domain, policy string) *policyCounters {
	k := policyKey{domain, policy}
	m.mu.RLock()
	pc := m.byPolicy[k]
	m.mu.RUnlock()
	if pc != nil {
		return pc
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if pc = m.byPolicy[k]; pc != nil {
		return pc
	}
	// Copy the strings: domain may point into a request buffer.
	k = policyKey{string([]byte(domain)), string([]byte(policy))}
	pc = &policyCounters{
		ok:         m.decisions.WithLabelValues(k.domain, k.policy, ResultOK),
		over:       m.decisions.WithLabelValues(k.domain, k.policy, ResultOverLimit),
		shadowOver: m.decisions.WithLabelValues(k.domain, k.policy, ResultShadowOverLimit),
		near:       m.nearLimit.WithLabelValues(k.domain, k.policy),
	}
	m.byPolicy[k] = pc
	return pc
}
