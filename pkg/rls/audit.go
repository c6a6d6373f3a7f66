package rls

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Auditor receives the denials of the calls (the binary's audit stream).
// Denied is called on the request path, concurrently, once per denied limit:
// it must be quick and must never block (a bounded queue that drops when
// full, say).
type Auditor interface {
	Denied(Denial)
}

// Denial is one limit that denied a call, or that would have denied it in
// shadow mode. It carries no raw descriptor value: the subject is its HMAC
// digest.
type Denial struct {
	// Time is when the call was answered (the store's clock).
	Time time.Time
	// Domain is the call's domain (a configured one: only configured
	// domains have limits).
	Domain string
	// PolicyID is the limit's policy ID, or OverridePolicy for a
	// request-supplied limit override.
	PolicyID string
	// Subject is the subject's digest.
	Subject limiter.SubjectDigest
	// Cost is the hits the descriptor asked for (its hits_addend as sent,
	// else the call's; 1 when unset), unbounded: the limit itself and the
	// hit counters take at most the policy's max cost of it.
	Cost uint64
	// Limit is the policy's limit; Remaining what remained of it (0 when
	// unknown: a store failure).
	Limit, Remaining int64
	// RetryAfter is the wait the answer announced.
	RetryAfter time.Duration
	// RequestID is the value of the call's request id descriptor
	// (Config.RequestIDKey), else its x-request-id gRPC metadata, bounded
	// to 128 bytes, or empty.
	RequestID string
	// Shadow: the rule is in shadow mode, so the call was answered OK.
	Shadow bool
	// StoreFailed: the store failed and a failure mode denied without a
	// decision (closed; also a local policy whose local limiter could not
	// decide): nothing is known of the limit's state.
	StoreFailed bool
	// FailureMode is the failure mode that answered when the store failed:
	// "local" (the local limiter decided: Limit and Remaining are its
	// share's) or "closed" (StoreFailed); empty when the store decided.
	FailureMode string
}

// audit reports one denied limit (respond, pass 2) to the auditor.
func (s *Server) audit(ctx context.Context, req *rlsv3.RateLimitRequest, now time.Time, sc *scratch, ds *descStatus) {
	p := ds.match.Rule.Policy
	asked, _ := askedHits(req, req.Descriptors[ds.desc])
	d := Denial{
		Time:        now,
		Domain:      req.Domain,
		PolicyID:    ds.policyLabel(),
		Subject:     ds.match.Subject,
		Cost:        asked,
		Limit:       p.Limit(),
		Remaining:   int64(ds.remaining),
		RetryAfter:  ds.retry,
		RequestID:   sc.requestID,
		Shadow:      ds.role == limiter.RoleShadow,
		StoreFailed: ds.fellBack(),
	}
	if ds.failedOver {
		d.FailureMode = ds.fallback.String()
	}
	if d.RequestID == "" {
		d.RequestID = requestID(ctx)
	}
	if ds.kind == statusStore {
		if out := &sc.outs[ds.batch]; out.Decision.Known() && out.Decision.Limit > 0 {
			d.Limit = out.Decision.Limit
		}
	}
	s.auditor.Denied(d)
}

// boundRequestID bounds a request id to 128 bytes.
func boundRequestID(id string) string {
	if len(id) > 128 {
		id = id[:128]
	}
	return id
}
