package app

import (
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// The rls server tells what it decides to the observers and the auditor
// it is given; the sinks below know nothing of it. These adapters join
// them.

// auditorOf feeds the server's denials to sink; nil when it is nil.
func auditorOf(sink *audit.Sink) rls.Auditor {
	if sink == nil {
		return nil
	}
	return auditor{sink}
}

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
