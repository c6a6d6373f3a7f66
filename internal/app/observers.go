package app

import (
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// The rls server tells what it decides to the observers and the auditor
// it is given; the sinks below know nothing of it. These adapters join
// them.

// observersOf is one observer for all of os that are not nil: nil when
// none is.
func observersOf(os ...rls.Observer) rls.Observer {
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

// topObserver feeds the top consumers tracker with every decided limit.
type topObserver struct{ t *topk.Tracker }

func (o topObserver) ObserveLimit(l rls.LimitObservation) {
	r := l.Rule
	if r == nil || r.Policy == nil {
		return
	}
	o.t.Record(topk.Observation{
		Domain: r.Domain, Policy: r.Policy.ID(), Key: r.Key,
		Subject: l.Subject, Hits: l.Hits,
		Denied: l.Over && !l.Shadow, ShadowDenied: l.Over && l.Shadow,
		Reserved: l.Reserved, Used: l.Used, Settle: l.Settled,
	})
}

func (topObserver) ObserveCall(rls.CallObservation) {}

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
	a.sink.Offer(audit.Event{Time: d.Time, Domain: d.Domain, PolicyID: d.PolicyID, Subject: d.Subject, Cost: d.Cost,
		Limit: d.Limit, Remaining: d.Remaining, RetryAfter: d.RetryAfter, RequestID: d.RequestID, Shadow: d.Shadow,
		Outcome: outcome, FailureMode: d.FailureMode})
}

// quotaDenialsOf writes what RLQS proxies reported denying to sink as
// denial events of source "rlqs"; nil when sink is nil.
func quotaDenialsOf(sink *audit.Sink, clock limiter.Clock) func(rlqs.Denial) {
	if sink == nil {
		return nil
	}
	if clock == nil {
		clock = limiter.SystemClock{}
	}
	return func(d rlqs.Denial) {
		sink.Offer(audit.Event{Time: clock.Now(), Domain: d.Domain, PolicyID: d.PolicyID, Subject: d.Subject,
			Cost: uint64(d.Denied), Limit: d.Limit, Remaining: d.Remaining, Shadow: d.Shadow,
			Outcome: audit.OutcomeOverLimit, Source: "rlqs"})
	}
}
