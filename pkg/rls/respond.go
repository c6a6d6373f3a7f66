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

// respond turns the slots and outcomes of one call into the response.
func (s *Server) respond(ctx context.Context, req *rlsv3.RateLimitRequest, known bool, sc *scratch) *rlsv3.RateLimitResponse {
	n := len(sc.slots)
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
	for i := range sc.slots {
		sl := &sc.slots[i]
		st := &statuses[i]
		ptrs[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		switch sl.kind {
		case slotUnmatched, slotNegative:
			s.metrics.unmatchedDescriptor(metricDomain)
			continue
		case slotReplaced:
			continue
		case slotUnlimited:
			st.LimitRemaining = math.MaxUint32
			s.metrics.policy(metricDomain, UnlimitedPolicy).ok.Inc()
			continue
		}
		rule := sl.match.Rule
		p := rule.Policy
		if sl.kind == slotNeverFits {
			// A zero limit, or a cost above the policy's max cost: it can
			// never fit, so the store is not asked and nothing is consumed.
			sl.over = true
			sl.reset = untilWindowEnd(now, rule.Window())
			sl.retry = sl.reset
		} else if out := &sc.outs[sl.batch]; out.Kind == limiter.Evaluated {
			d := &out.Decision
			sl.over = !d.Allowed
			sl.remaining = clampUint32(d.Remaining)
			if !d.ResetAt.IsZero() {
				// Stores keep milliseconds; so does the answer.
				sl.reset = max(d.ResetAt.Sub(now), 0).Round(time.Millisecond)
			}
			sl.retry = d.RetryAfter
			if d.Allowed && sl.role != limiter.ModeShadow && nearLimit(d.Limit, d.Remaining) {
				s.metrics.policy(metricDomain, sl.policyLabel()).near.Inc()
			}
		} else {
			s.storeFailed(ctx, p, sl, out)
			if !sl.over {
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
		st.LimitRemaining = sl.remaining
		durations = append(durations, durationpb.Duration{Seconds: int64(sl.reset / time.Second), Nanos: int32(sl.reset % time.Second)})
		st.DurationUntilReset = &durations[len(durations)-1]
	}

	// Pass 2: what is reported (the reference's rules). An ordinary
	// descriptor over the limit denies; quota-mode descriptors deny only
	// when every one of them is over; shadow descriptors are counted and
	// reported OK.
	quotaDenies := limiter.QuotaBlocks(sc.batch, sc.outs)
	overall := rlsv3.RateLimitResponse_OK
	for i := range sc.slots {
		sl := &sc.slots[i]
		if sl.kind != slotStore && sl.kind != slotNeverFits {
			continue
		}
		pc := s.metrics.policy(metricDomain, sl.policyLabel())
		switch {
		case !sl.over:
			pc.ok.Inc()
		case sl.role == limiter.ModeShadow:
			pc.shadowOver.Inc()
			s.logDenial(ctx, msgShadowDenied, sl)
		case sl.role == limiter.ModeQuota && !quotaDenies:
			pc.ok.Inc()
		default:
			sl.reported = true
			statuses[i].Code = rlsv3.RateLimitResponse_OVER_LIMIT
			overall = rlsv3.RateLimitResponse_OVER_LIMIT
			pc.over.Inc()
			s.logDenial(ctx, msgDenied, sl)
		}
	}

	resp := &rlsv3.RateLimitResponse{OverallCode: overall, Statuses: ptrs}
	s.addHeadersAndBody(resp, sc)
	return resp
}

// storeFailed applies the policy's failure mode to a failed outcome.
func (s *Server) storeFailed(ctx context.Context, p *limiter.Policy, sl *slot, out *limiter.Outcome) {
	mode := p.FailureMode()
	s.metrics.storeError(out.Kind)
	s.metrics.fallback(mode)
	sl.fellBack = true
	if mode == limiter.FailClosed {
		sl.over = true
		sl.retry = max(out.RetryAfter, fallbackRetryAfter)
		sl.reset = sl.retry
	}
	if ce := s.sampled.Check(zapcore.WarnLevel, msgStoreFailure); ce != nil {
		fields := []zap.Field{
			zap.String("policy", p.ID()),
			zap.String("outcome", out.Kind.String()),
			zap.String("category", out.Category),
			zap.String("failure_mode", mode.String()),
			zap.String("subject", subjectPrefix(&sl.match.Subject)),
			zap.Error(out.Err),
		}
		if id := requestID(ctx); id != "" {
			fields = append(fields, zap.String("x_request_id", id))
		}
		ce.Write(fields...)
	}
}

func (s *Server) logDenial(ctx context.Context, msg string, sl *slot) {
	ce := s.sampled.Check(zapcore.InfoLevel, msg)
	if ce == nil {
		return
	}
	fields := []zap.Field{
		zap.String("policy", sl.match.Rule.Policy.ID()),
		zap.String("subject", subjectPrefix(&sl.match.Subject)),
		zap.Uint32("remaining", sl.remaining),
		zap.Int64("retry_after_seconds", ceilSeconds(sl.retry)),
		zap.Bool("fallback", sl.fellBack),
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

// policyLabel is the policy label of the slot's metrics: the configured
// policy ID, or OverridePolicy for a request-supplied limit override (whose
// ID derives from request-supplied keys and so must not become a label).
func (sl *slot) policyLabel() string {
	if sl.override {
		return OverridePolicy
	}
	return sl.match.Rule.Policy.ID()
}

// eligible reports whether a status feeds the X-RateLimit-* headers: a
// limit that was decided (not shadow, not a fail-open fallback) and either
// allowed or reported over (a quota-mode denial that did not deny is left
// out).
func (sl *slot) eligible() bool {
	if sl.kind != slotStore && sl.kind != slotNeverFits {
		return false
	}
	if sl.role == limiter.ModeShadow || sl.fellBack && !sl.over {
		return false
	}
	return !sl.over || sl.reported
}
