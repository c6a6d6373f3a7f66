package observe

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// AuditDrainTimeout bounds writing the queued audit events on shutdown,
// after the in-flight calls have drained.
const AuditDrainTimeout = 2 * time.Second

// AuditConfig configures the audit sink of StartAudit.
type AuditConfig struct {
	// Writer receives the events; nil: no audit sink. (Optional)
	Writer audit.Writer
	// Sink and Where name the writer's kind and destination for the start
	// log.
	Sink, Where string
	// Sample, PolicySample and QueueSize are the sink's (audit.Config).
	Sample       float64
	PolicySample map[string]float64
	QueueSize    int
	// UsageInterval is the period of the usage records, for the start log.
	UsageInterval time.Duration
	// Registerer takes the audit metrics, registered with or without a
	// sink. (Required)
	Registerer prometheus.Registerer
	// Log receives the sink's start line and write failures. (Required)
	Log *zap.Logger
}

// StartAudit starts the audit sink of cfg, nil when cfg.Writer is nil. The
// writer is closed if the sink cannot start.
func StartAudit(cfg AuditConfig) (*audit.Sink, error) {
	m, err := audit.NewMetrics(cfg.Registerer)
	if err != nil {
		if cfg.Writer != nil {
			_ = cfg.Writer.Close()
		}
		return nil, err
	}
	if cfg.Writer == nil {
		return nil, nil
	}
	sink, err := audit.New(audit.Config{
		Writer:       cfg.Writer,
		Metrics:      m,
		QueueSize:    cfg.QueueSize,
		Sample:       cfg.Sample,
		PolicySample: cfg.PolicySample,
		Logger:       cfg.Log,
	})
	if err != nil {
		_ = cfg.Writer.Close()
		return nil, err
	}
	cfg.Log.Info("writing denial events to the audit sink",
		zap.String("sink", cfg.Sink),
		zap.String("to", cfg.Where),
		zap.Float64("sample", cfg.Sample),
		zap.Int("policy_samples", len(cfg.PolicySample)),
		zap.Int("queue_size", cfg.QueueSize),
		zap.Duration("usage_interval", cfg.UsageInterval))
	return sink, nil
}

// CloseAudit writes what sink holds (bounded by AuditDrainTimeout) and
// stops it.
func CloseAudit(sink *audit.Sink, log *zap.Logger) {
	if err := sink.Close(AuditDrainTimeout); err != nil {
		log.Warn("audit sink: closing", zap.Error(err))
	}
}

// Auditor feeds the rls server's denials to sink.
func Auditor(sink *audit.Sink) rls.Auditor { return auditor{sink} }

type auditor struct{ sink *audit.Sink }

func (a auditor) Denied(d rls.Denial) {
	outcome := audit.OutcomeOverLimit
	if d.StoreFailed {
		outcome = audit.OutcomeFailureMode
	}
	a.sink.Offer(audit.Event{
		Time:        d.Time,
		Domain:      d.Domain,
		PolicyID:    d.PolicyID,
		Subject:     d.Subject,
		Cost:        d.Cost,
		Limit:       d.Limit,
		Remaining:   d.Remaining,
		RetryAfter:  d.RetryAfter,
		RequestID:   d.RequestID,
		Shadow:      d.Shadow,
		Outcome:     outcome,
		FailureMode: d.FailureMode,
	})
}

// OfferUsage queues on sink one usage record per policy top tracks,
// stamped now.
func OfferUsage(sink *audit.Sink, top *topk.Tracker, now time.Time) {
	for _, u := range top.Usage(topk.Filter{}) {
		sink.OfferUsage(audit.Event{Time: now, Domain: u.Domain, PolicyID: u.Policy, Usage: &audit.Usage{
			Key: u.Key, Since: u.Since, Hits: u.Hits, Decisions: u.Decisions, Denials: u.Denials,
			ShadowDenials: u.ShadowDenials, DistinctSubjects: u.DistinctSubjects,
		}})
	}
}
