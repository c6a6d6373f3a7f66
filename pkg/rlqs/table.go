package rlqs

import (
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Bounds of what a report teaches: the interval between two reports of a
// bucket is taken within them.
const (
	minInterval = 100 * time.Millisecond
	maxInterval = time.Minute
)

// aggKey names an aggregate: one limit's state of one subject.
type aggKey struct {
	policy   string
	revision uint32
	subject  limiter.SubjectDigest
}

// aggregate is one limit's state of one subject, shared by the proxies
// that report buckets matching it on every replica: its usage is charged
// to the store, its capacity divided among their demands.
type aggregate struct {
	policy, twin *limiter.Policy
	subject      limiter.SubjectDigest
	tag          limiter.Tag
	domain       string
	subs         map[*subscription]struct{}
	// pending is the admitted usage reported since the last charge;
	// allowed and denied what the reports said since the last tick.
	pending, allowed, denied int64
	// The last tick's figures (mrps), for the metrics; remote is what the
	// other replicas' proxies were assigned.
	capacity, demand, assigned, remote int64
	// window is the reset time of the fixed window the last tick saw,
	// start that of the one before (zero until seen). Of pending,
	// beforeStart was admitted before start and beforeEnd before window:
	// the next tick does not charge what was admitted before the window
	// it charges began (that window is over).
	window, start          time.Time
	beforeStart, beforeEnd int64
	// lastRemaining and readAt are the last tick's reading; others the
	// rate (requests a second) the window is drawn on by anything but
	// the proxies' reports: RLS calls.
	lastRemaining int64
	readAt        time.Time
	others        float64
}

// subscription is one bucket of one stream.
type subscription struct {
	st   *stream
	key  string
	id   *rlqsv3.BucketId
	snap *descriptors.Snapshot
	// fixed, when not nil, is the blanket the bucket is always assigned
	// (no rule, unlimited, a limit of 0, a rule RLQS refuses, shadow
	// mode); a shadow bucket's usage is still charged.
	fixed *typev3.RateLimitStrategy
	aggs  []*aggregate
	// rates are this tick's assignment per aggregate (mrps).
	rates []int64
	// divided: a tick has set its rates (a subscription made while a
	// tick runs waits for the next).
	divided bool
	gone    bool

	demand     int64         // mrps, unknownDemand until a second report
	lastSample int64         // mrps, the last interval's demand
	admitting  int64         // mrps the proxy admitted over its last interval
	interval   time.Duration // between its reports, 0 until known
	lastReport time.Time
	lastUsed   time.Time

	sent     *typev3.RateLimitStrategy
	sentRate int64
	// prevRate is the rate held before sentAt (unknownDemand: none).
	prevRate int64
	sentAt   time.Time
	sentTTL  time.Duration
}

// subscribe matches a new bucket of st on the current rules and binds it
// to its aggregates; a bucket with a fixed blanket is answered at once.
func (s *Service) subscribe(st *stream, key string, id *rlqsv3.BucketId, now time.Time) *subscription {
	sub := &subscription{st: st, key: key, id: proto.Clone(id).(*rlqsv3.BucketId), demand: unknownDemand, lastUsed: now}
	st.subs[key] = sub
	s.bind(sub, now)
	return sub
}

// bind matches sub on the current rules and binds it to its aggregates.
func (s *Service) bind(sub *subscription, now time.Time) {
	snap := s.cfg.Rules()
	sub.snap, sub.fixed, sub.aggs, sub.rates, sub.divided = snap, nil, sub.aggs[:0], sub.rates[:0], false
	var m descriptors.Match
	reason, ok := "no rules loaded", false
	if snap != nil {
		m, reason, ok = snap.MatchBucket(sub.st.domain, sub.id.GetBucket())
	}
	r := m.Rule
	label := "unknown" // a domain the rules do not have is a request value
	if snap != nil && snap.HasDomain(sub.st.domain) {
		label = sub.st.domain
	}
	switch {
	case !ok:
		// As the RLS path answers OK for a descriptor no rule limits.
		s.cfg.Metrics.refused(label, "no_rule")
		s.cfg.Log.Debug("rlqs: a bucket matches no rule: allowed", zap.String("reason", reason))
		sub.fixed = blanket(true)
	case r.Unlimited || r.Policy == nil:
		sub.fixed = blanket(true)
	case Refusal(r) != "":
		s.cfg.Metrics.refused(label, "unsupported_rule")
		s.cfg.Log.Debug("rlqs: a bucket's rule has no quota: answered by its failure mode", zap.String("reason", Refusal(r)))
		sub.fixed = blanket(r.Policy.FailureMode() != limiter.FailClosed)
	default:
		limits, subjects := []*descriptors.Rule{r}, []limiter.SubjectDigest{m.Subject}
		if len(r.Limits) > 0 && len(m.Subjects) == len(r.Limits) {
			limits, subjects = r.Limits, m.Subjects
		}
		for i, l := range limits {
			p := l.Policy
			if p.Limit() == 0 {
				sub.fix(false)
				continue
			}
			a := s.aggregateOf(sub.st.domain, p, subjects[i], m.Tag)
			if a == nil {
				s.cfg.Metrics.refused(label, "too_many_aggregates")
				sub.fix(p.FailureMode() != limiter.FailClosed)
				continue
			}
			a.subs[sub] = struct{}{}
			sub.aggs = append(sub.aggs, a)
			sub.rates = append(sub.rates, 0)
		}
		if r.ShadowMode {
			// Shadow mode never denies: counted and charged, allowed.
			sub.fixed = blanket(true)
		}
	}
	if sub.fixed != nil {
		s.push(sub, sub.fixed, unknownDemand, now)
	}
}

// fix makes sub's assignment a blanket: a deny wins over an allow, as one
// limit of several that denies denies the request.
func (sub *subscription) fix(allow bool) {
	if sub.fixed == nil || !allow {
		sub.fixed = blanket(allow)
	}
}

// aggregateOf returns the aggregate of p's state of subject, made when
// there is room (nil when not).
func (s *Service) aggregateOf(domain string, p *limiter.Policy, subject limiter.SubjectDigest, tag limiter.Tag) *aggregate {
	k := aggKey{policy: p.ID(), revision: p.Revision(), subject: subject}
	if a := s.aggs[k]; a != nil {
		return a
	}
	if len(s.aggs) >= s.cfg.Limits.Aggregates {
		return nil
	}
	twin, err := chargeTwin(p)
	if err != nil {
		s.cfg.Log.Error("rlqs: no charging twin", zap.Error(err))
		return nil
	}
	a := &aggregate{policy: p, twin: twin, subject: subject, tag: tag, domain: domain, subs: make(map[*subscription]struct{})}
	s.aggs[k] = a
	return a
}

// unbind takes sub off its aggregates; an aggregate left without
// subscriptions goes at the next tick, once its usage is charged.
func (sub *subscription) unbind() {
	for _, a := range sub.aggs {
		delete(a.subs, sub)
	}
	sub.aggs, sub.rates, sub.gone = nil, nil, true
}

// observe records a report of sub at now, covering elapsed (0 when the
// report does not say): its usage (charged at the next tick) and what it
// teaches of the proxy's demand and reporting interval.
func (sub *subscription) observe(now time.Time, elapsed time.Duration, allowed, denied int64) {
	from := sub.lastReport
	if from.IsZero() && elapsed > 0 {
		from = now.Add(-elapsed)
	}
	if !sub.lastReport.IsZero() {
		elapsed := min(max(now.Sub(sub.lastReport), minInterval), maxInterval)
		sample := int64(min(float64(allowed+denied)*1e6/float64(elapsed.Milliseconds()), float64(unknownDemand-1)))
		// The larger of the last two intervals': a proxy held below its
		// demand reports the rest denied, so a sample is what it wants;
		// two ride over the noise of a few requests an interval, and a
		// proxy whose demand falls frees its share an interval later.
		sub.demand = max(sample, sub.lastSample)
		sub.lastSample = sample
		sub.admitting = int64(min(float64(allowed)*1e6/float64(elapsed.Milliseconds()), float64(unknownDemand-1)))
		if sub.interval == 0 {
			sub.interval = elapsed
		} else {
			sub.interval = (sub.interval + elapsed) / 2
		}
	}
	sub.lastReport = now
	if allowed+denied > 0 {
		sub.lastUsed = now
	}
	for _, a := range sub.aggs {
		a.beforeStart = min(a.beforeStart+sub.admittedBefore(a.start, from, now, allowed, denied), 1<<53-1)
		a.beforeEnd = min(a.beforeEnd+sub.admittedBefore(a.window, from, now, allowed, denied), 1<<53-1)
		a.pending = min(a.pending+allowed, 1<<53-1)
		a.allowed, a.denied = satAdd(a.allowed, allowed), satAdd(a.denied, denied)
	}
}

// action is the bucket action assigning strategy for ttl.
func (sub *subscription) action(strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: sub.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttlOf(ttl),
				RateLimitStrategy:    strategy,
			},
		},
	}
}

// abandon is the action telling the proxy to forget the bucket.
func (sub *subscription) abandon() *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: sub.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

// sentStrategy is the strategy the proxy holds for sub: the last sent,
// else its blanket, else allow.
func (sub *subscription) sentStrategy() *typev3.RateLimitStrategy {
	switch {
	case sub.sent != nil:
		return sub.sent
	case sub.fixed != nil:
		return sub.fixed
	}
	return blanket(true)
}

// ttlFor is the time to live of sub's next assignment: the configured
// one, else three of its reporting intervals (whole seconds, 2 s to a
// minute; 15 s while the interval is unknown: Envoy reports every 5 s).
func (s *Service) ttlFor(sub *subscription) time.Duration {
	if s.cfg.AssignmentTTL > 0 {
		return s.cfg.AssignmentTTL
	}
	if sub.interval == 0 {
		return 15 * time.Second
	}
	ttl := (3*sub.interval + time.Second - 1).Truncate(time.Second)
	return min(max(ttl, 2*time.Second), maxTTL)
}

// maxTTL bounds an assignment's time to live.
const maxTTL = time.Minute

// push sends sub strategy (whose rate is rate) unless the proxy holds one
// within 5 % of it (a proxy replacing its token bucket keeps only the
// whole tokens of its share of the old one, so each change costs a
// little; the bound is the same both ways, so that the rates held follow
// the shares rather than their lows or highs), until half its time to
// live has passed.
func (s *Service) push(sub *subscription, strategy *typev3.RateLimitStrategy, rate int64, now time.Time) {
	ttl := s.ttlFor(sub)
	if sub.sent != nil && (proto.Equal(sub.sent, strategy) || near(sub.sentRate, rate)) {
		if now.Sub(sub.sentAt) < sub.sentTTL/2 {
			return
		}
		strategy, rate = sub.sent, sub.sentRate
	}
	sub.prevRate = unknownDemand
	if sub.sent != nil {
		sub.prevRate = sub.sentRate
	}
	sub.sent, sub.sentRate, sub.sentAt, sub.sentTTL = strategy, rate, now, ttl
	sub.st.enqueue(sub.key, sub.action(strategy, ttl))
	s.cfg.Metrics.action(actionAssign)
}

// near reports whether the proxy holding rate held may keep it for want:
// they differ by 5 % or less (unknown or blanket rates are near only when
// equal).
func near(held, want int64) bool {
	if held == unknownDemand || want == unknownDemand {
		return held == want
	}
	d := want - held
	if d < 0 {
		d = -d
	}
	return d*20 <= max(held, want)
}

// admittedBefore is the part of allowed, admitted over [from, to), that
// was admitted before b: in proportion to the rate the proxy held (its
// last change at sentAt), at most what it was asked for, over each part;
// in proportion to time when those rates are not known.
func (sub *subscription) admittedBefore(b, from, to time.Time, allowed, denied int64) int64 {
	switch {
	case b.IsZero() || from.IsZero() || !from.Before(b):
		return 0
	case !b.Before(to):
		return allowed
	}
	span := to.Sub(from).Seconds()
	part := b.Sub(from).Seconds() / span
	asked := float64(allowed+denied) / span
	if sub.sent != nil && sub.sentRate != unknownDemand && sub.prevRate != unknownDemand && asked > 0 {
		// held(t0, t1) is what the proxy could admit over [t0, t1).
		held := func(t0, t1 time.Time) float64 {
			var w float64
			if cut := maxTime(minTime(sub.sentAt, t1), t0); cut.After(t0) {
				w += min(float64(sub.prevRate)/1000, asked) * cut.Sub(t0).Seconds()
				t0 = cut
			}
			return w + min(float64(sub.sentRate)/1000, asked)*max(t1.Sub(t0).Seconds(), 0)
		}
		if w1, w2 := held(from, b), held(b, to); w1+w2 > 0 {
			part = w1 / (w1 + w2)
		}
	}
	return int64(float64(allowed) * part)
}
