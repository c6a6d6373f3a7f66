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

// respond turns the descriptor statuses and outcomes of one call into the
// response (decision, report, then each descriptor's binding limit); now
// is the clock's reading after the store answered. The call's metrics are
// sc.metrics, of its domain label.
func (s *Server) respond(ctx context.Context, req *rlsv3.RateLimitRequest, sc *scratch, now time.Time) *rlsv3.RateLimitResponse {
	n := len(req.Descriptors)

	// One allocation per message type for the whole response, or one in
	// all for the answer to one descriptor.
	denies := false
	for i := range sc.outs {
		denies = denies || !sc.outs[i].Decision.Allowed
	}
	space := newAnswerSpace(n, len(sc.batch), denies)
	statuses, ptrs, limits, durations := space.statuses, space.ptrs, space.limits, space.durations

	// Pass 1: what each limit decided.
	for i := range statuses {
		ptrs[i] = &statuses[i]
		statuses[i].Code = rlsv3.RateLimitResponse_OK
	}
	for i := range sc.descs {
		ds := &sc.descs[i]
		ds.current = -1
		if !s.decision(ctx, sc, ds, statuses, now) {
			continue
		}
		rule := ds.match.Rule
		limits = append(limits, rlsv3.RateLimitResponse_RateLimit{
			Name:            rule.Name,
			RequestsPerUnit: rule.RequestsPerUnit,
			Unit:            responseUnit(rule.Unit),
		})
		ds.current = len(limits) - 1
		if rule.UnitMultiplier > 1 {
			limits[ds.current].UnitMultiplier = wrapperspb.UInt32(rule.UnitMultiplier)
		}
		durations = append(durations, durationpb.Duration{Seconds: int64(ds.reset / time.Second), Nanos: int32(ds.reset % time.Second)})
	}

	// Pass 2: what is reported (the reference's rules). An ordinary
	// descriptor over the limit denies; quota-mode descriptors deny only
	// when every one of them is over; shadow descriptors are counted and
	// reported OK.
	quotaDenies := limiter.QuotaBlocks(sc.batch, sc.outs)
	overall := rlsv3.RateLimitResponse_OK
	for i := range sc.descs {
		ds := &sc.descs[i]
		if e, units := ds.reservation(sc); e != resNone {
			rc := sc.metrics.reserving(s.metrics, ds.policyLabel())
			rc.count(e, units)
			if e == resSettled && s.observer != nil && !ds.override {
				s.observeSettle(ds, units)
			}
			if ds.kind == statusStore && sc.outs[ds.batch].Decision.Expired > 0 {
				rc.count(resExpired, sc.outs[ds.batch].Decision.Expired)
			}
		}
		if ds.kind != statusStore && ds.kind != statusNeverFits || ds.release {
			continue // a release is no request of the limit: not counted
		}
		if s.report(ctx, req, sc, ds, quotaDenies, now) {
			statuses[ds.desc].Code = rlsv3.RateLimitResponse_OVER_LIMIT
			overall = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}

	// Pass 3: each descriptor reports its binding limit.
	for lo, hi := range descGroups(sc.descs) {
		if b := bindingLimit(sc.descs[lo:hi]); b >= 0 {
			ds := &sc.descs[lo+b]
			st := &statuses[ds.desc]
			st.CurrentLimit = &limits[ds.current]
			st.LimitRemaining = ds.remaining
			st.DurationUntilReset = &durations[ds.current]
		}
	}

	resp := space.resp
	resp.OverallCode, resp.Statuses = overall, ptrs
	s.addHeadersAndBody(resp, sc, &space)
	if s.dynamicMetadata {
		resp.DynamicMetadata = s.buildDynamicMetadata(req, statuses, sc)
	}
	// After the dynamic metadata: the lease marker is added to it.
	s.markLeases(resp, sc)
	return resp
}

// decision reads what the limit of ds decided into ds (step 1 of
// respond), counting the descriptors that need no decision, and reports
// whether its status carries a current_limit.
func (s *Server) decision(ctx context.Context, sc *scratch, ds *descStatus, statuses []rlsv3.RateLimitResponse_DescriptorStatus, now time.Time) bool {
	dm := sc.metrics
	switch ds.kind {
	case statusUnmatched, statusNegative:
		s.metrics.unmatchedDescriptor(dm.label)
		return false
	case statusReplaced, statusRequestID, statusNoLease:
		return false
	case statusUnlimited:
		statuses[ds.desc].LimitRemaining = math.MaxUint32
		pc := dm.policy(s.metrics, unlimitedPolicy)
		pc.count(resultOK, false, false)
		pc.hits.Add(float64(ds.countedHits()))
		return false
	}
	rule := ds.match.Rule
	p := rule.Policy
	if ds.kind == statusNeverFits {
		// A zero limit, or a cost above the policy's max cost: it can
		// never fit, so the store is not asked and nothing is consumed.
		// So for an override refused beyond the domain's bound, until a
		// tracked override policy's place frees.
		ds.over = true
		ds.reset = untilWindowEnd(now, rule.Window())
		if c := p.Calendar(); c != nil {
			ds.reset = untilPeriodEnd(now, c)
		}
		if ds.refusedWait != 0 {
			ds.reset = ds.refusedWait
		}
		ds.retry = ds.reset
		return true
	}
	out := &sc.outs[ds.batch]
	if out.Kind != limiter.Evaluated || !out.Decision.Known() {
		s.storeFailed(ctx, sc, p, ds, out)
		// Fail open: nothing is known about the limit's state, so the
		// status carries no current_limit for Envoy to build headers from.
		return ds.over
	}
	d := &out.Decision
	if d.Source == limiter.SourceFallback {
		// The store failed; the local limiter decided instead.
		ds.failedOver, ds.fallback = true, d.Fallback
		sc.storeFailed = true
	}
	ds.over = !d.Allowed
	ds.blocked = d.Blocked
	ds.remaining = clampUint32(d.Remaining)
	if !d.ResetAt.IsZero() {
		// Stores keep milliseconds; so does the answer.
		ds.reset = max(d.ResetAt.Sub(now), 0).Round(time.Millisecond)
	}
	ds.retry = d.RetryAfter
	if d.Allowed && ds.role != limiter.RoleShadow && nearLimit(d.Limit, d.Remaining) {
		dm.policy(s.metrics, ds.policyLabel()).near.Inc()
	}
	return true
}

// report counts, logs, audits and observes the limit of ds as the answer
// reports it (step 2 of respond), and reports whether it makes the call
// OVER_LIMIT.
func (s *Server) report(ctx context.Context, req *rlsv3.RateLimitRequest, sc *scratch, ds *descStatus, quotaDenies bool, now time.Time) bool {
	pc := sc.metrics.policy(s.metrics, ds.policyLabel())
	pc.hits.Add(float64(ds.countedHits()))
	local := ds.failedOver && ds.fallback == limiter.FailLocal
	r := resultOver
	switch {
	case !ds.over, ds.role.Quota() && !quotaDenies:
		r = resultOK
	case ds.role == limiter.RoleShadow:
		r = resultShadowOver
	default:
		ds.reported = true
	}
	ds.result = r
	pc.count(r, local, ds.blocked)
	if r != resultOK {
		msg := msgDenied
		if r == resultShadowOver {
			msg = msgShadowDenied
		}
		s.logDenial(ctx, msg, ds)
		if s.auditor != nil {
			s.audit(ctx, req, now, sc, ds)
		}
	}
	if s.observer != nil && !ds.override {
		s.observeLimit(sc, ds)
	}
	return ds.reported
}

// bindingLimit returns the index, in the statuses of one descriptor's
// limits, of the limit its status reports, or -1 when none has a current
// limit. Of the limits reported over the limit, it is the one with the
// longest wait (then the latest reset); when none is, the one with the
// fewest remaining (then the latest reset). A descriptor with one limit
// reports that limit.
func bindingLimit(limits []descStatus) int {
	b := -1
	for i := range limits {
		ds := &limits[i]
		if ds.current < 0 {
			continue
		}
		if b < 0 {
			b = i
			continue
		}
		c := &limits[b]
		switch {
		case ds.reported != c.reported:
			if ds.reported {
				b = i
			}
		case ds.reported:
			if ds.retry > c.retry || ds.retry == c.retry && ds.reset > c.reset {
				b = i
			}
		case ds.remaining < c.remaining || ds.remaining == c.remaining && ds.reset > c.reset:
			b = i
		}
	}
	return b
}

// storeFailed reports a failure mode's answer to a store failure (a
// decision that knows nothing of the limit's state, see
// pkg/limiter/failover): fail open allows with no current_limit; fail
// closed, or local when the local limiter could not decide either, denies
// until its RetryAfter (an outcome that is no decision at all reads as
// such a denial). It is logged and reported under the mode that answered
// (Decision.Fallback: closed for such a local policy), not the policy's.
func (s *Server) storeFailed(ctx context.Context, sc *scratch, p *limiter.Policy, ds *descStatus, out *limiter.Outcome) {
	mode := out.Decision.Fallback
	ds.failedOver, ds.fallback = true, mode
	sc.storeFailed = true
	if d := &out.Decision; !d.Allowed {
		ds.over = true
		ds.retry = d.RetryAfter
		ds.reset = ds.retry
	}
	if ce := s.sampled.Check(zapcore.WarnLevel, msgStoreFailure); ce != nil {
		fields := []zap.Field{
			zap.String("policy", p.ID()),
			zap.String("outcome", out.Failed.String()),
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
		zap.Bool("fallback", ds.failedOver),
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
	return boundRequestID(v[0])
}

// maxUnlimitedHits bounds what one descriptor of an unlimited rule adds
// to the hit counters (countedHits): the largest hits_addend of a call.
const maxUnlimitedHits = math.MaxUint32

// countedHits is what a limit adds to the hit counters: hits_total and the
// Observer's Hits (the reference's stats, statsd, top consumers). It is the
// descriptor's hits bounded by the most one request can take of the limit,
// the policy's max cost (the limit, or the debt ceiling of charge: always;
// at least 1), or maxUnlimitedHits on an unlimited rule; 0 for a probe.
// So one request moves a counter by at most what its limit could take
// (hits beyond it are denied without asking the store, or recorded as the
// ceiling by charge: always); the audit record keeps what was asked
// (Denial.Cost).
func (ds *descStatus) countedHits() int64 {
	if ds.probe {
		return 0
	}
	bound := int64(maxUnlimitedHits)
	if p := ds.match.Rule.Policy; ds.kind != statusUnlimited && p != nil {
		bound = max(p.MaxCost(), 1)
	}
	return min(ds.cost, bound)
}

// reservation is what ds did with a reservation of a reserving limit, and
// its units: a committed reserve and the units it holds; a settle whose
// marker named a reservation of the limit, answered by the store (or the
// local fallback), and the usage it reports; a settle whose marker named
// none (statusNoLease, or releaseValue: a plain charge). It is resNone for
// anything else: another policy, an uncommitted reserve, a probe, a settle
// a fail-open or fail-closed mode answered. Whether a named reservation
// was still live is the store's to know: a replay or a settle after
// expiry counts as settled, and the store changes nothing.
func (ds *descStatus) reservation(sc *scratch) (resEvent, int64) {
	if ds.kind != statusStore && ds.kind != statusNoLease || !ds.match.Rule.Policy.Reserve().On() {
		return resNone, 0
	}
	if ds.kind == statusNoLease || ds.release && ds.leaseAt == 0 {
		return resUnnamed, 0
	}
	o := &sc.outs[ds.batch]
	if ds.release {
		if o.Kind == limiter.Evaluated && o.Decision.Known() {
			return resSettled, ds.cost
		}
	} else if holder, _, held := ds.heldAt(o); held && holder != markerCharge {
		return resReserved, ds.cost
	}
	return resNone, 0
}

// policyLabel is the policy label of the descriptor's metrics: the configured
// policy ID, or OverridePolicy for a request-supplied limit override (whose
// ID derives from request-supplied keys and so must not become a label).
func (ds *descStatus) policyLabel() string {
	if ds.override {
		return overridePolicy
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
	if ds.role == limiter.RoleShadow || ds.fellBack() && !ds.over {
		return false
	}
	return !ds.over || ds.reported
}
