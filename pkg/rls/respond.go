package rls

import (
	"context"
	"encoding/hex"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Response header names. Envoy lower-cases header names; these are the
// spellings of the IETF draft (draft-ietf-httpapi-ratelimit-headers-03).
const (
	HeaderLimit       = "X-RateLimit-Limit"
	HeaderRemaining   = "X-RateLimit-Remaining"
	HeaderReset       = "X-RateLimit-Reset"
	HeaderRetryAfter  = "Retry-After"
	HeaderContentType = "Content-Type"
	bodyContentType   = "application/json"
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

// addHeadersAndBody writes the rate-limit headers of the most restrictive
// status and, on OVER_LIMIT, Retry-After and the JSON body.
func (s *Server) addHeadersAndBody(resp *rlsv3.RateLimitResponse, sc *scratch) {
	mode := descriptors.HeadersFull
	chosen := -1
	var retry time.Duration
	for i := range sc.slots {
		sl := &sc.slots[i]
		if !sl.eligible() {
			continue
		}
		mode = stricterHeaders(mode, s.headerMode(sl.match.Rule))
		if chosen < 0 {
			chosen = i
			if sl.reported {
				retry = sl.retry
			}
			continue
		}
		c := &sc.slots[chosen]
		switch {
		case sl.reported && (!c.reported || sl.retry > c.retry):
			chosen = i
		case !sl.reported && !c.reported && (sl.remaining < c.remaining || sl.remaining == c.remaining && sl.reset > c.reset):
			chosen = i
		}
		if sl.reported {
			retry = max(retry, sl.retry)
		}
	}
	if chosen < 0 {
		return
	}
	over := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	c := &sc.slots[chosen]
	retrySecs := max(ceilSeconds(retry), 1)

	var hv [5]corev3.HeaderValue
	nh := 0
	buf := sc.buf[:0]
	if mode == descriptors.HeadersFull {
		buf = strconv.AppendUint(buf, uint64(c.match.Rule.RequestsPerUnit), 10)
		for i := range sc.slots {
			sl := &sc.slots[i]
			if !sl.eligible() || duplicatePolicy(sc.slots[:i], sl) {
				continue
			}
			buf = append(buf, ", "...)
			buf = strconv.AppendUint(buf, uint64(sl.match.Rule.RequestsPerUnit), 10)
			buf = append(buf, ";w="...)
			buf = strconv.AppendInt(buf, ceilSeconds(sl.match.Rule.Window()), 10)
			if capacity := sl.match.Rule.Policy.Limit(); capacity > int64(sl.match.Rule.RequestsPerUnit) {
				// A token bucket with a burst above its rate.
				buf = append(buf, ";burst="...)
				buf = strconv.AppendInt(buf, capacity, 10)
			}
		}
		hv[nh] = corev3.HeaderValue{Key: HeaderLimit, Value: string(buf)}
		nh++
		hv[nh] = corev3.HeaderValue{Key: HeaderRemaining, Value: strconv.FormatUint(uint64(c.remaining), 10)}
		nh++
		hv[nh] = corev3.HeaderValue{Key: HeaderReset, Value: strconv.FormatInt(ceilSeconds(c.reset), 10)}
		nh++
	}
	if over && mode != descriptors.HeadersNone {
		hv[nh] = corev3.HeaderValue{Key: HeaderRetryAfter, Value: strconv.FormatInt(retrySecs, 10)}
		nh++
	}
	if over {
		// The body names the policy and the wait, never the subject. In
		// `none` mode it says only that the request was limited.
		buf = append(buf[:0], `{"error":"rate_limited"`...)
		if mode != descriptors.HeadersNone {
			buf = append(buf, `,"policy":"`...)
			buf = append(buf, c.match.Rule.Policy.ID()...) // [a-z0-9._:/-]: no escaping needed
			buf = append(buf, `","retry_after_seconds":`...)
			buf = strconv.AppendInt(buf, retrySecs, 10)
		}
		buf = append(buf, '}')
		resp.RawBody = append([]byte(nil), buf...)
		// Envoy lets the service's content-type replace the local reply's.
		hv[nh] = corev3.HeaderValue{Key: HeaderContentType, Value: bodyContentType}
		nh++
	}
	sc.buf = buf
	if nh == 0 {
		return
	}
	backing := make([]corev3.HeaderValue, nh)
	ptrs := make([]*corev3.HeaderValue, nh)
	for i := 0; i < nh; i++ {
		backing[i].Key, backing[i].Value = hv[i].Key, hv[i].Value
		ptrs[i] = &backing[i]
	}
	resp.ResponseHeadersToAdd = ptrs
}

// duplicatePolicy reports whether an earlier eligible slot already listed the
// same (limit, window) quota policy.
func duplicatePolicy(earlier []slot, sl *slot) bool {
	for i := range earlier {
		e := &earlier[i]
		if e.eligible() && e.match.Rule.RequestsPerUnit == sl.match.Rule.RequestsPerUnit && e.match.Rule.Window() == sl.match.Rule.Window() {
			return true
		}
	}
	return false
}

func (s *Server) headerMode(r *descriptors.Rule) descriptors.HeaderMode {
	if r.Headers == descriptors.HeadersDefault {
		return s.defaultHeaders
	}
	return r.Headers
}

// stricterHeaders returns the mode that reveals less: none < retry_after < full.
func stricterHeaders(a, b descriptors.HeaderMode) descriptors.HeaderMode {
	rank := func(m descriptors.HeaderMode) int {
		switch m {
		case descriptors.HeadersNone:
			return 0
		case descriptors.HeadersRetryAfter:
			return 1
		}
		return 2
	}
	if rank(b) < rank(a) {
		return b
	}
	return a
}

// nearLimit reports whether 80% or more of limit is used.
func nearLimit(limit, remaining int64) bool {
	if limit <= 0 {
		return false
	}
	used := limit - remaining
	return used*5 >= limit*4
}

func clampUint32(v int64) uint32 {
	switch {
	case v <= 0:
		return 0
	case v >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// untilWindowEnd is the time to the end of the epoch-aligned window that
// contains now (the fixed-window reset point).
func untilWindowEnd(now time.Time, window time.Duration) time.Duration {
	if window <= 0 {
		return time.Second
	}
	ms := window.Milliseconds()
	if ms <= 0 {
		return window
	}
	rem := now.UnixMilli() % ms
	return time.Duration(ms-rem) * time.Millisecond
}
