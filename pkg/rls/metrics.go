package rls

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// MetricsNamespace prefixes every metric name: envoy_rls_*.
const MetricsNamespace = "envoy_rls"

// Label values that stand in for request data. A label never carries a
// descriptor value: domains come from the loaded configuration (or are
// UnknownDomainLabel) and policies are configured policy IDs.
const (
	unknownDomainLabel = "unknown"
	unlimitedPolicy    = "unlimited"
	overridePolicy     = "override"
)

// Decision results, the values of the result label of decisions_total.
const (
	resultLabelOK         = "ok"
	ResultOverLimit       = "over_limit"
	ResultShadowOverLimit = "shadow_over_limit"
)

// Metrics holds the RPC metrics of the service: calls, decisions and store
// latency. The stores, the failover wrapper (store errors and fallbacks)
// and the rule watcher count their own (memory.NewMetrics,
// denycache.NewMetrics, failover.NewMetrics, the binary's reload
// counter). Build it with NewMetrics on a registry the caller owns; it is
// safe for concurrent use.
type Metrics struct {
	decisions    *prometheus.CounterVec
	nearLimit    *prometheus.CounterVec
	unmatched    *prometheus.CounterVec
	storeLatency *prometheus.HistogramVec
	calls        *prometheus.CounterVec
	callLatency  *prometheus.HistogramVec
	local        *prometheus.CounterVec
	penalty      *prometheus.CounterVec
	hits         *prometheus.CounterVec
	ovRefused    *prometheus.CounterVec
	ovPolicies   *prometheus.GaugeVec
	reservations *prometheus.CounterVec
	resUnits     *prometheus.CounterVec

	// Children resolved once, so that the hot path does not hash label
	// values on every call.
	byCode [codes.Unauthenticated + 1]prometheus.Counter

	// byDomain holds the children of each domain label, read without a
	// lock on every call (see lazyMap).
	byDomain lazyMap[string, *domainMetrics]
}

// domainMetrics are the children of one domain label: its latency
// histograms and the counters of its policies.
type domainMetrics struct {
	label       string
	call, store prometheus.Observer
	byPolicy    lazyMap[string, *policyCounters]
	// byReserving holds the reservation counters of the reserving
	// policies only, so that other policies have no such series.
	byReserving lazyMap[string, *reservationCounters]
}

// result is how a limit is reported: an index into policyCounters' arrays.
type result uint8

const (
	resultOK         result = iota // resultLabelOK
	resultOver                     // ResultOverLimit
	resultShadowOver               // ResultShadowOverLimit
	results
)

// resultLabels are the result labels of the decision counters.
var resultLabels = [results]string{resultLabelOK, ResultOverLimit, ResultShadowOverLimit}

type policyCounters struct {
	// decisions, and those of the local fallback (a subset), by result.
	decisions, local [results]prometheus.Counter
	// penalty counts the denials by the penalty box (a subset of the
	// over_limit and shadow_over_limit decisions; nil for ok).
	penalty [results]prometheus.Counter
	near    prometheus.Counter
	// hits adds each decision's cost.
	hits prometheus.Counter
}

// count counts one decision: local when the local fallback made it,
// blocked when the penalty box denied it.
func (pc *policyCounters) count(r result, local, blocked bool) {
	pc.decisions[r].Inc()
	if local {
		pc.local[r].Inc()
	}
	if blocked && pc.penalty[r] != nil {
		pc.penalty[r].Inc()
	}
}

// latencyBuckets span 50µs to about 1.6s.
var latencyBuckets = prometheus.ExponentialBuckets(0.00005, 2, 16)

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("rls: metrics: a registerer is required")
	}
	m := &Metrics{
		decisions: newCounterVec("decisions_total",
			"Descriptor decisions by configured domain, policy ID and result (ok, over_limit, shadow_over_limit).",
			"domain", "policy", "result"),
		nearLimit: newCounterVec("near_limit_total",
			"Allowed descriptor decisions that left 80% or more of the limit used.",
			"domain", "policy"),
		unmatched: newCounterVec("unmatched_total",
			"Descriptors that matched no rule (domain is \"unknown\" when the domain is not configured).",
			"domain"),
		storeLatency: newLatencyHistogram("store_duration_seconds",
			"Duration of one Store.Evaluate batch, by configured domain."),
		calls: newCounterVec("calls_total",
			"ShouldRateLimit calls by gRPC status code.",
			"code"),
		callLatency: newLatencyHistogram("call_duration_seconds",
			"Duration of ShouldRateLimit calls, in the server, by configured domain (\"unknown\" when the domain is not configured or the request was not read)."),
		hits: newCounterVec("hits_total",
			"Hits (the sum of the descriptors' costs, hits_addend) of descriptor decisions by configured domain and policy ID; probes add 0.",
			"domain", "policy"),
		local: newCounterVec("local_fallback_decisions_total",
			"Descriptor decisions of failure_mode local policies made by this replica's local limiter while the store failed, by domain, policy ID and result (as decisions_total, which counts them too).",
			"domain", "policy", "result"),
		penalty: newCounterVec("penalty_denials_total",
			"Descriptor decisions denied because the subject is in the policy's penalty box (a block after an offence), by domain, policy ID and result (over_limit, shadow_over_limit; decisions_total counts them too).",
			"domain", "policy", "result"),
		ovRefused: newCounterVec("override_refused_total",
			"Descriptors with a request-supplied limit (override) answered OVER_LIMIT because their domain already tracked --override-max-policies override policies, by configured domain.",
			"domain"),
		reservations: newCounterVec("reservations_total",
			"Reservations of reserving limits by configured domain, policy ID and event: reserved (a committed reserve), settled (a settle whose marker named a reservation of the limit, answered by the store), unnamed (a settle whose marker named none of the limit, or the value release: a plain charge), expired (reservations never settled within their ttl, counted when a later reserve or settle of the subject drops them; they stay charged at their estimate).",
			"domain", "policy", "event"),
		resUnits: newCounterVec("reservation_units_total",
			"Units of reserving limits by configured domain, policy ID and kind: reserved (held by committed reserves), used (the usage that settled ones reported); used/reserved is how close the estimates are.",
			"domain", "policy", "kind"),
		ovPolicies: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: MetricsNamespace, Name: "override_policies",
			Help: "Override policies (key lists and windows of request-supplied limits) tracked for a configured domain: at most --override-max-policies."},
			[]string{"domain"}),
	}
	for _, c := range []prometheus.Collector{
		m.decisions, m.nearLimit, m.unmatched, m.storeLatency, m.calls, m.callLatency, m.local, m.penalty, m.hits, m.ovRefused, m.ovPolicies, m.reservations, m.resUnits,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: registering metrics: %w", err)
		}
	}
	for c := range m.byCode {
		m.byCode[c] = m.calls.WithLabelValues(codes.Code(c).String())
	}
	return m, nil
}

// newCounterVec is a counter of the service's namespace with the given
// labels.
func newCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: MetricsNamespace, Name: name, Help: help}, labels)
}

// newLatencyHistogram is a histogram of durations in seconds, of the
// service's namespace, with latencyBuckets, by domain.
func newLatencyHistogram(name, help string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: MetricsNamespace, Name: name, Help: help, Buckets: latencyBuckets}, []string{"domain"})
}

// observeCall counts one call of domain (a configured domain or
// UnknownDomainLabel).
func (m *Metrics) observeCall(domain string, c codes.Code, d time.Duration) {
	m.observeCallOf(m.domain(domain), c, d)
}

// observeCallOf counts one call of the domain label of dm.
func (m *Metrics) observeCallOf(dm *domainMetrics, c codes.Code, d time.Duration) {
	if int(c) < len(m.byCode) {
		m.byCode[c].Inc()
	} else {
		m.calls.WithLabelValues(c.String()).Inc()
	}
	dm.call.Observe(d.Seconds())
}

// domain returns the children of one domain label: a configured domain
// or UnknownDomainLabel, so the set is bounded by the configuration.
func (m *Metrics) domain(domain string) *domainMetrics {
	return m.byDomain.get(domain, func() (string, *domainMetrics) {
		// Copy the string: domain may point into a request buffer.
		domain = string([]byte(domain))
		return domain, &domainMetrics{label: domain, call: m.callLatency.WithLabelValues(domain), store: m.storeLatency.WithLabelValues(domain)}
	})
}

// lazyMap is a map of values made at a key's first use, read on every call
// without a lock (sync.Map: a read of a key it holds writes no shared
// memory, where a read lock would write its reader count, and an addition
// costs amortized constant time however many keys it holds). Its keys are
// configured values (domains, policy IDs), so the set is bounded by the
// configuration. The zero value is an empty map.
type lazyMap[K comparable, V any] struct {
	m sync.Map
}

// get returns the value of k; the first use of k adds the key and value
// that add returns (the key a copy of k that holds no request buffer).
// Callers racing on a new key may each call add; one value is kept.
func (c *lazyMap[K, V]) get(k K, add func() (K, V)) V {
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	nk, nv := add()
	v, _ := c.m.LoadOrStore(nk, nv)
	return v.(V)
}

// overrideRefused counts a refused override of a configured domain.
func (m *Metrics) overrideRefused(domain string) { m.ovRefused.WithLabelValues(domain).Inc() }

// overridePolicies sets the override policies tracked for a configured
// domain.
func (m *Metrics) overridePolicies(domain string, n int) {
	m.ovPolicies.WithLabelValues(domain).Set(float64(n))
}

// unmatchedDescriptor counts a descriptor of domain that matched no rule.
// Its series appears at the first one, so it is looked up then.
func (m *Metrics) unmatchedDescriptor(domain string) {
	m.unmatched.WithLabelValues(domain).Inc()
}

// policy returns the counters of one policy label of the domain: policy
// IDs are configured values (or UnlimitedPolicy, OverridePolicy), so the
// set is bounded by the configuration.
func (dm *domainMetrics) policy(m *Metrics, policy string) *policyCounters {
	return dm.byPolicy.get(policy, func() (string, *policyCounters) {
		// Copy the string: it may point into a request buffer.
		policy = string([]byte(policy))
		domain := dm.label
		pc := &policyCounters{
			near: m.nearLimit.WithLabelValues(domain, policy),
			hits: m.hits.WithLabelValues(domain, policy),
		}
		for r, label := range resultLabels {
			pc.decisions[r] = m.decisions.WithLabelValues(domain, policy, label)
			pc.local[r] = m.local.WithLabelValues(domain, policy, label)
			if result(r) != resultOK {
				pc.penalty[r] = m.penalty.WithLabelValues(domain, policy, label)
			}
		}
		return policy, pc
	})
}

// resEvent is what a call did with a reservation of a reserving limit
// (descStatus.reservation): an index into reservationCounters.events.
type resEvent uint8

const (
	resNone     resEvent = iota // not a reserve or a settle, or uncommitted
	resReserved                 // a committed reserve
	resSettled                  // a settle naming a reservation, answered by the store
	resUnnamed                  // a settle naming none: nothing settled, or a plain charge
	resExpired                  // a reservation the store dropped expired, unsettled
	resEvents
)

// resEventLabels are the event labels of reservations_total.
var resEventLabels = [resEvents]string{resReserved: "reserved", resSettled: "settled", resUnnamed: "unnamed", resExpired: "expired"}

// reservationCounters are the reservation counters of one reserving
// policy label.
type reservationCounters struct {
	events         [resEvents]prometheus.Counter
	reserved, used prometheus.Counter
}

// count counts one event and its units: reserved ones for a reserve,
// used ones for a settle; for resExpired, units is how many expired.
func (rc *reservationCounters) count(e resEvent, units int64) {
	if e == resExpired {
		rc.events[e].Add(float64(units))
		return
	}
	rc.events[e].Inc()
	switch e {
	case resReserved:
		rc.reserved.Add(float64(units))
	case resSettled:
		rc.used.Add(float64(units))
	}
}

// reserving returns the reservation counters of one policy label of the
// domain, made at the label's first reservation event (see policy).
func (dm *domainMetrics) reserving(m *Metrics, policy string) *reservationCounters {
	return dm.byReserving.get(policy, func() (string, *reservationCounters) {
		policy = string([]byte(policy))
		rc := &reservationCounters{
			reserved: m.resUnits.WithLabelValues(dm.label, policy, "reserved"),
			used:     m.resUnits.WithLabelValues(dm.label, policy, "used"),
		}
		for e := resReserved; e < resEvents; e++ {
			rc.events[e] = m.reservations.WithLabelValues(dm.label, policy, resEventLabels[e])
		}
		return policy, rc
	})
}
