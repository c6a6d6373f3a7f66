package rls

import (
	"context"
	"encoding/hex"
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

const (
	msgDenied       = "request over limit"
	msgShadowDenied = "request over limit in shadow mode (allowed)"
	msgStoreFailure = "store failed; answered by the policy's failure mode"
)

// respond turns the descriptor statuses and outcomes of one call into the response.
func (s *Server) respond(ctx context.Context, req *rlsv3.RateLimitRequest, known bool, sc *scratch) *rlsv3.RateLimitResponse {
	n := len(sc.descs)
	now := s.clock.Now()
	metricDomain := UnknownDomainLabel
	if known {
		metricDomain = req.Domain
	}

	// One allocation per message type for the whole response.
	statuses := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	ptrs := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	var limits []rlsv3.RateLimitResponse_RateLimit
	var durations []durationpb.Duration
	if limited := len(sc.batch); limited > 0 {
		limits = make([]rlsv3.RateLimitResponse_RateLimit, 0, limited)
		durations = make([]durationpb.Duration, 0, limited)
	}

	// Pass 1: what each limit decided.
	for i := range sc.descs {
		ds := &sc.descs[i]
		st := &statuses[i]
		ptrs[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		switch ds.kind {
		case statusUnmatched, statusNegative:
			s.metrics.unmatchedDescriptor(metricDomain)
			continue
		case statusReplaced:
			continue
		case statusUnlimited:
			st.LimitRemaining = math.MaxUint32
			s.metrics.policy(metricDomain, UnlimitedPolicy).ok.Inc()
			continue
		}
		rule := ds.match.Rule
		p := rule.Policy
		if ds.kind == statusNeverFits {
			// A zero limit, or a cost above the policy's max cost: it can
			// never fit, so the store is not asked and nothing is consumed.
			ds.over = true
			ds.reset = untilWindowEnd(now, rule.Window())
			if c := p.Calendar(); c != nil {
				ds.reset = untilPeriodEnd(now, c)
			}
			ds.retry = ds.reset
		} else if out := &sc.outs[ds.batch]; out.Kind == limiter.Evaluated {
			d := &out.Decision
			ds.over = !d.Allowed
			ds.remaining = clampUint32(d.Remaining)
			if !d.ResetAt.IsZero() {
				// Stores keep milliseconds; so does the answer.
				ds.reset = max(d.ResetAt.Sub(now), 0).Round(time.Millisecond)
			}
			ds.retry = d.RetryAfter
			if d.Allowed && ds.role != limiter.RoleShadow && nearLimit(d.Limit, d.Remaining) {
				s.metrics.policy(metricDomain, ds.policyLabel()).near.Inc()
			}
		} else {
			s.storeFailed(ctx, sc, p, ds, out)
			if !ds.over {
				// Fail open: nothing is known about the limit's state, so
				// the status carries no current_limit for Envoy to build
				// headers from.
				continue
			}
		}
		limits = append(limits, rlsv3.RateLimitResponse_RateLimit{
			Name:            rule.Name,
			RequestsPerUnit: rule.RequestsPerUnit,
			Unit:            responseUnit(rule.Unit),
		})
		cl := &limits[len(limits)-1]
		if rule.UnitMultiplier > 1 {
			cl.UnitMultiplier = wrapperspb.UInt32(rule.UnitMultiplier)
		}
		st.CurrentLimit = cl
		st.LimitRemaining = ds.remaining
		durations = append(durations, durationpb.Duration{Seconds: int64(ds.reset / time.Second), Nanos: int32(ds.reset % time.Second)})
		st.DurationUntilReset = &durations[len(durations)-1]
	}

	// Pass 2: what is reported (the reference's rules). An ordinary
	// descriptor over the limit denies; quota-mode descriptors deny only
	// when every one of them is over; shadow descriptors are counted and
	// reported OK.
	quotaDenies := limiter.QuotaBlocks(sc.batch, sc.outs)
	overall := rlsv3.RateLimitResponse_OK
	for i := range sc.descs {
		ds := &sc.descs[i]
		if ds.kind != statusStore && ds.kind != statusNeverFits {
			continue
		}
		pc := s.metrics.policy(metricDomain, ds.policyLabel())
		local := ds.kind == statusStore && sc.outs[ds.batch].Kind == limiter.Evaluated &&
			sc.outs[ds.batch].Decision.Source == limiter.SourceFallback
		if local {
			// The store failed; the local limiter decided instead.
			sc.storeFailed = true
		}
		switch {
		case !ds.over:
			pc.ok.Inc()
			if local {
				pc.localOK.Inc()
			}
		case ds.role == limiter.RoleShadow:
			pc.shadowOver.Inc()
			if local {
				pc.localShadowOver.Inc()
			}
			s.logDenial(ctx, msgShadowDenied, ds)
		case ds.role == limiter.RoleQuota && !quotaDenies:
			pc.ok.Inc()
			if local {
				pc.localOK.Inc()
			}
		default:
			ds.reported = true
			statuses[i].Code = rlsv3.RateLimitResponse_OVER_LIMIT
			overall = rlsv3.RateLimitResponse_OVER_LIMIT
			pc.over.Inc()
			if local {
				pc.localOver.Inc()
			}
			s.logDenial(ctx, msgDenied, ds)
		}
		if s.observer != nil && !ds.override {
			s.observeLimit(sc, ds)
		}
	}

	resp := &rlsv3.RateLimitResponse{OverallCode: overall, Statuses: ptrs}
	s.addHeadersAndBody(resp, sc)
	return resp
}

// storeFailed applies the policy's failure mode to a failed outcome.
func (s *Server) storeFailed(ctx context.Context, sc *scratch, p *limiter.Policy, ds *descStatus, out *limiter.Outcome) {
	mode := p.FailureMode()
	s.metrics.storeError(out.Kind)
	s.metrics.fallback(mode)
	ds.fellBack = true
	sc.storeFailed = true
	if mode != limiter.FailOpen {
		// Closed, or local when the local limiter could not decide either
		// (see LocalConfig).
		ds.over = true
		ds.retry = max(out.RetryAfter, fallbackRetryAfter)
		ds.reset = ds.retry
	}
	if ce := s.sampled.Check(zapcore.WarnLevel, msgStoreFailure); ce != nil {
		fields := []zap.Field{
			zap.String("policy", p.ID()),
			zap.String("outcome", out.Kind.String()),
			zap.String("category", out.Category),
			zap.String("failure_mode", mode.String()),
			zap.String("subject", subjectPrefix(&ds.match.Subject)),
			zap.Error(out.Err),
		}
		if id := requestID(ctx); id != "" {
			fields = append(fields, zap.String("x_request_id", id))
		}
		ce.Write(fields...)
	}
}

func (s *Server) logDenial(ctx context.Context, msg string, ds *descStatus) {
	ce := s.sampled.Check(zapcore.InfoLevel, msg)
	if ce == nil {
		return
	}
	fields := []zap.Field{
		zap.String("policy", ds.match.Rule.Policy.ID()),
		zap.String("subject", subjectPrefix(&ds.match.Subject)),
		zap.Uint32("remaining", ds.remaining),
		zap.Int64("retry_after_seconds", ceilSeconds(ds.retry)),
		zap.Bool("fallback", ds.fellBack),
	}
	if id := requestID(ctx); id != "" {
		fields = append(fields, zap.String("x_request_id", id))
	}
	ce.Write(fields...)
}

// subjectPrefix is the first 8 hex characters of the subject digest: enough
// to correlate log lines, too short to be a useful identifier.
func subjectPrefix(d *limiter.SubjectDigest) string {
	return hex.EncodeToString(d[:4])
}

// requestID returns Envoy's x-request-id from the incoming metadata, bounded.
func requestID(ctx context.Context) string {
	v := metadata.ValueFromIncomingContext(ctx, "x-request-id")
	if len(v) == 0 {
		return ""
	}
	id := v[0]
	if len(id) > 128 {
		id = id[:128]
	}
	return id
}

// policyLabel is the policy label of the descriptor's metrics: the configured
// policy ID, or OverridePolicy for a request-supplied limit override (whose
// ID derives from request-supplied keys and so must not become a label).
func (ds *descStatus) policyLabel() string {
	if ds.override {
		return OverridePolicy
	}
	return ds.match.Rule.Policy.ID()
}

// eligible reports whether a status feeds the X-RateLimit-* headers: a
// limit that was decided (not shadow, not a fail-open fallback) and either
// allowed or reported over (a quota-mode denial that did not deny is left
// out).
func (ds *descStatus) eligible() bool {
	if ds.kind != statusStore && ds.kind != statusNeverFits {
		return false
	}
	if ds.role == limiter.RoleShadow || ds.fellBack && !ds.over {
		return false
	}
	return !ds.over || ds.reported
}
