package rlqs

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the service's collectors. Their labels are configured
// names (domains and policy IDs of the rule set), never a request value.
type Metrics struct {
	streams                        prometheus.Gauge
	refusals                       *prometheus.CounterVec
	actions                        *prometheus.CounterVec
	subscribers                    *prometheus.GaugeVec
	demand, assigned, capacityRate *prometheus.GaugeVec
	reported                       *prometheus.CounterVec
}

// Kinds of actions_total.
const (
	actionAssign  = "assign"
	actionAbandon = "abandon"
)

// NewMetrics registers the service's collectors on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns = "envoy_rls"
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, []string{"domain", "policy"})
	}
	m := &Metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "rlqs_streams",
			Help: "RLQS streams open on this replica (one per proxy and domain)."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rlqs_buckets_refused_total",
			Help: "RLQS buckets assigned a blanket rule instead of a quota, by domain (\"unknown\" when not configured) and reason: no_rule (allowed, as RLS answers OK), unsupported_rule (a concurrency, reserve or penalty rule: its failure mode), too_many_aggregates (the replica's bound: its failure mode)."},
			[]string{"domain", "reason"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rlqs_actions_total",
			Help: "RLQS bucket actions sent by this replica, by kind: assign (a quota or blanket with its time to live), abandon (the bucket reported no request for --rlqs-abandon-after)."},
			[]string{"kind"}),
		subscribers:  gauge("rlqs_subscribers", "Buckets subscribed on this replica, by domain and policy ID (a bucket of a rule with several limits counts once per limit)."),
		demand:       gauge("rlqs_demand_rate", "Requests per second this replica's proxies want of a policy, estimated from their reports (a proxy reported once counts as 0 here)."),
		assigned:     gauge("rlqs_assigned_rate", "Requests per second assigned to this replica's proxies by a policy at the last tick."),
		capacityRate: gauge("rlqs_capacity_rate", "Requests per second the policy's subjects may still be assigned across every replica, summed over subjects, at the last tick."),
		reported: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rlqs_reported_requests_total",
			Help: "Requests the proxies reported deciding locally, by domain, policy ID and result (allowed, denied); allowed ones are charged to the limit."},
			[]string{"domain", "policy", "result"}),
	}
	for _, c := range []prometheus.Collector{m.streams, m.refusals, m.actions, m.subscribers, m.demand, m.assigned, m.capacityRate, m.reported} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rlqs: registering metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) streamOpened() {
	if m != nil {
		m.streams.Inc()
	}
}

func (m *Metrics) streamClosed() {
	if m != nil {
		m.streams.Dec()
	}
}

// refused counts a bucket of domain (configured or not: the caller only
// passes domains the rule set has, else "unknown") assigned a blanket.
func (m *Metrics) refused(domain, reason string) {
	if m != nil {
		m.refusals.WithLabelValues(domain, reason).Inc()
	}
}

func (m *Metrics) action(kind string) {
	if m != nil {
		m.actions.WithLabelValues(kind).Inc()
	}
}

// observe sets the per-policy gauges from the aggregates after a tick,
// and counts the requests reported since the last one (the tick then
// clears them).
func (m *Metrics) observe(aggs map[aggKey]*aggregate) {
	if m == nil {
		return
	}
	type sums struct{ subs, demand, assigned, capacity float64 }
	by := make(map[[2]string]*sums)
	for _, a := range aggs {
		k := [2]string{a.domain, a.policy.ID()}
		s := by[k]
		if s == nil {
			s = &sums{}
			by[k] = s
		}
		s.subs += float64(len(a.subs))
		if a.demand != unknownDemand {
			s.demand += float64(a.demand) / 1000
		}
		if a.assigned != unknownDemand {
			s.assigned += float64(a.assigned) / 1000
		}
		if a.capacity != unknownDemand {
			s.capacity += float64(a.capacity) / 1000
		}
		if a.allowed > 0 {
			m.reported.WithLabelValues(k[0], k[1], "allowed").Add(float64(a.allowed))
		}
		if a.denied > 0 {
			m.reported.WithLabelValues(k[0], k[1], "denied").Add(float64(a.denied))
		}
	}
	for _, g := range []*prometheus.GaugeVec{m.subscribers, m.demand, m.assigned, m.capacityRate} {
		g.Reset()
	}
	for k, s := range by {
		m.subscribers.WithLabelValues(k[0], k[1]).Set(s.subs)
		m.demand.WithLabelValues(k[0], k[1]).Set(s.demand)
		m.assigned.WithLabelValues(k[0], k[1]).Set(s.assigned)
		m.capacityRate.WithLabelValues(k[0], k[1]).Set(s.capacity)
	}
}
