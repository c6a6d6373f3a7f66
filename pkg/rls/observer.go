package rls

import (
	"time"

	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Observer receives the service's decisions for a metrics sink other than
// Metrics (the statsd sink of the binary, say). Its methods are called on
// the request path, concurrently: they must be quick, must not block, and
// must not retain their argument.
type Observer interface {
	// ObserveLimit is called once for every limit of a call that was
	// evaluated or that can never fit (not for unmatched, unlimited,
	// replaced or refund descriptors, nor for request-supplied overrides),
	// and once for every settle of a reservation (Settled: no decision).
	ObserveLimit(LimitObservation)
	// ObserveCall is called once per ShouldRateLimit call.
	ObserveCall(CallObservation)
}

// LimitObservation is one limit's share of a call.
type LimitObservation struct {
	// Rule is the matched rule: its strings come from the configuration,
	// never from the request.
	Rule *descriptors.Rule
	// Subject is the limit's subject digest (an HMAC of the policy ID and
	// the matched entries, never a raw value).
	Subject limiter.SubjectDigest
	// Hits is the descriptor's cost (hits_addend, 1 when unset) bounded by
	// the policy's max cost, so that one request adds at most its limit to
	// a counter; 0 for a probe (an explicit per-descriptor hits_addend of
	// 0), which counts nothing.
	Hits int64
	// Over: the limit denied the hits (also in shadow mode, where the call
	// is still answered OK, and for a limit that can never fit).
	Over bool
	// Shadow: the rule is in shadow mode.
	Shadow bool
	// LocalCache: the local deny cache answered (Over is then true).
	LocalCache bool
	// Penalty: the subject is in the policy's penalty box (Over is then
	// true); nothing was consumed.
	Penalty bool
	// StoreFailed: the store failed and the policy's failure mode answered;
	// nothing is known of the limit's state (Over is the failure mode's
	// answer).
	StoreFailed bool
	// Decided: Limit and Remaining hold the decision (false for a limit
	// that can never fit and for a store failure).
	Decided bool
	// Limit and Remaining are the decision's limit and what remains of it:
	// after the hits when Consumed, before them otherwise.
	Limit, Remaining int64
	// Consumed: the hits were taken from the limit (false when it denied,
	// or when it allowed but another limit of the call denied, so that the
	// call consumed nothing).
	Consumed bool
	// Reserved is, for a committed reserve of a reserving limit, the
	// units it holds (the estimate); 0 otherwise.
	Reserved int64
	// Settled: a settle whose marker named a reservation of the limit,
	// answered by the store; Used is the usage it reports. It is no
	// decision: Hits is 0 and only Rule, Subject and Used are set.
	Settled bool
	Used    int64
}

// CallObservation is one ShouldRateLimit call.
type CallObservation struct {
	// Code is the call's gRPC status code (OK for every answered call,
	// OVER_LIMIT ones included).
	Code codes.Code
	// Duration is the call's time in the server.
	Duration time.Duration
	// StoreFailed: the store failed for at least one limit of the call
	// (answered by its failure mode, failure_mode local included).
	StoreFailed bool
}

// observeLimit reports one limit of a call (respond, pass 2) to the
// observer.
func (s *Server) observeLimit(sc *scratch, ds *descStatus) {
	o := LimitObservation{
		Rule:        ds.match.Rule,
		Subject:     ds.match.Subject,
		Hits:        ds.countedHits(),
		Over:        ds.over,
		Shadow:      ds.role == limiter.RoleShadow,
		StoreFailed: ds.fellBack(),
	}
	if e, units := ds.reservation(sc); e == resReserved {
		o.Reserved = units
	}
	if ds.kind == statusStore {
		if out := &sc.outs[ds.batch]; out.Decision.Known() {
			d := &out.Decision
			o.Decided = true
			o.Limit, o.Remaining, o.Consumed = d.Limit, d.Remaining, d.Consumed
			o.LocalCache = d.Source == limiter.SourceLocalCache
			o.Penalty = d.Blocked
		}
	}
	s.observer.ObserveLimit(o)
}

// observeSettle reports a settle of a reservation of the limit of ds to
// the observer: the usage it reports.
func (s *Server) observeSettle(ds *descStatus, used int64) {
	s.observer.ObserveLimit(LimitObservation{Rule: ds.match.Rule, Subject: ds.match.Subject, Settled: true, Used: used})
}
