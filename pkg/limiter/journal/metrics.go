package journal

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the journal keeps, replays and drops, as Prometheus
// collectors. It implements Observer; pass it as Config.Observer. Safe for
// concurrent use.
type Metrics struct {
	entries    prometheus.Gauge
	journalled *prometheus.CounterVec
	replayed   *prometheus.CounterVec
	dropped    *prometheus.CounterVec
}

var _ observer = (*Metrics)(nil)

// NewMetrics creates the collectors and registers them on reg:
// envoy_rls_journal_entries, envoy_rls_journal_journalled_total{kind},
// envoy_rls_journal_replayed_total{kind} and
// envoy_rls_journal_dropped_total{kind,reason}. The labels take fixed
// values only (Kind.String, the Reason* constants); every series exists
// from the start.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("journal: metrics: a registerer is required")
	}
	m := &Metrics{
		entries: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "envoy_rls", Name: "journal_entries",
			Help: "Charges, lease releases and settles the store could not record, held to be applied when it answers again."}),
		journalled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "envoy_rls", Name: "journal_journalled_total",
			Help: "Charges, lease releases and settles the store could not record, kept in the journal, by kind (charge, release, settle)."}, []string{"kind"}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "envoy_rls", Name: "journal_replayed_total",
			Help: "Journal entries applied by the store after it failed them, by kind."}, []string{"kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "envoy_rls", Name: "journal_dropped_total",
			Help: "Charges, lease releases and settles never applied, by kind and reason: full (the journal was full), incompatible, invalid, expired (a release past its lease TTL), policy_gone (restored for a policy the rules no longer hold)."}, []string{"kind", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.entries, m.journalled, m.replayed, m.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("journal: registering metrics: %w", err)
		}
	}
	for k := range numKinds {
		m.journalled.WithLabelValues(k.String())
		m.replayed.WithLabelValues(k.String())
		for _, r := range []string{reasonFull, reasonIncompatible, reasonInvalid, reasonExpired, reasonPolicyGone} {
			m.dropped.WithLabelValues(k.String(), r)
		}
	}
	return m, nil
}

// Journalled counts one settlement kept.
func (m *Metrics) Journalled(k kind) { m.journalled.WithLabelValues(k.String()).Inc() }

// Replayed counts n entries applied by the store.
func (m *Metrics) Replayed(k kind, n int) { m.replayed.WithLabelValues(k.String()).Add(float64(n)) }

// Dropped counts n entries dropped for reason.
func (m *Metrics) Dropped(k kind, reason string, n int) {
	m.dropped.WithLabelValues(k.String(), reason).Add(float64(n))
}

// Entries sets the number of entries held.
func (m *Metrics) Entries(n int) { m.entries.Set(float64(n)) }
