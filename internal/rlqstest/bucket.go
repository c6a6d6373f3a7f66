package rlqstest

import (
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// bucket is one cached quota bucket.
type bucket struct {
	id         map[string]string
	lastReport time.Time
	// allowed and denied count since the last report.
	allowed, denied           uint64
	totalAllowed, totalDenied uint64
	// action is the strategy in force, nil when none (the no-assignment
	// behaviour); tb is its token bucket when it is one.
	action  *typev3.RateLimitStrategy
	tb      *tokenBucket
	expires time.Time
	last    Assignment
}

// usage takes bk's usage since its last report, as the report to send now.
func (bk *bucket) usage(now time.Time) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	elapsed := max(now.Sub(bk.lastReport), 0)
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: bk.id},
		TimeElapsed:        &durationpb.Duration{Seconds: int64(elapsed / time.Second)},
		NumRequestsAllowed: bk.allowed,
		NumRequestsDenied:  bk.denied,
	}
	bk.allowed, bk.denied, bk.lastReport = 0, 0, now
	return u
}

// expire drops bk's assignment when its TTL has passed.
func (bk *bucket) expire(now time.Time) {
	if bk.action != nil && !now.Before(bk.expires) {
		bk.action, bk.tb = nil, nil
	}
}

// decide is the filter's decision for one request of bk.
func (p *Proxy) decide(bk *bucket, now time.Time) bool {
	switch s := bk.action.GetStrategy().(type) {
	case nil:
		return p.unassignedAllows
	case *typev3.RateLimitStrategy_BlanketRule_:
		return s.BlanketRule != typev3.RateLimitStrategy_DENY_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		return bk.tb.take(p.seconds(now))
	default:
		// requests_per_time_unit: Envoy allows.
		return true
	}
}

// maxTTLSeconds keeps a TTL inside time.Duration.
const maxTTLSeconds = 1 << 32

// apply applies one response's actions as Envoy's global client does.
func (p *Proxy) apply(resp *rlqsv3.RateLimitQuotaResponse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	for _, a := range resp.GetBucketAction() {
		id := a.GetBucketId().GetBucket()
		bk := p.buckets[bucketKey(id)]
		if len(id) == 0 || bk == nil {
			p.stats.Ignored++
			continue
		}
		bk.expire(now)
		switch act := a.GetBucketAction().(type) {
		case *rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_:
			delete(p.buckets, bucketKey(id))
			p.stats.Abandons++
		case *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
			p.assign(bk, act.QuotaAssignmentAction, now)
		default:
			// Envoy caches an action without assignment or abandon and,
			// its TTL being unset, expires it at once.
			bk.action, bk.tb = nil, nil
		}
	}
}

func (p *Proxy) assign(bk *bucket, qa *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction, now time.Time) {
	s := qa.GetRateLimitStrategy()
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		bk.tb = nil
	case *typev3.RateLimitStrategy_TokenBucket:
		if bk.tb == nil || !sameTokenBucket(st.TokenBucket, bk.tb.spec) {
			bk.tb = newTokenBucket(st.TokenBucket, p.seconds(now), bk.tb)
		}
		bk.tb.spec = st.TokenBucket
	default:
		// requests_per_time_unit and no strategy: Envoy logs and skips.
		p.stats.Ignored++
		return
	}
	secs := min(max(qa.GetAssignmentTimeToLive().GetSeconds(), 0), maxTTLSeconds)
	bk.action = s
	bk.expires = now.Add(time.Duration(secs) * time.Second)
	bk.last = Assignment{Strategy: s, TTL: qa.GetAssignmentTimeToLive().AsDuration(), At: now}
	p.stats.Assignments++
	if secs < 1 {
		p.stats.ShortTTL++
	}
}

// seconds is now on the token buckets' time line.
func (p *Proxy) seconds(now time.Time) float64 { return now.Sub(p.epoch).Seconds() }

// minFillRate is Envoy's floor on a fill rate: one token a year.
const minFillRate = 1.0 / (365 * 24 * 60 * 60)

// tokenBucket is Envoy's atomic token bucket: at time now it holds
// min(max, (now-t0)×rate) tokens.
type tokenBucket struct {
	spec          *typev3.TokenBucket
	max, rate, t0 float64
}

// newTokenBucket builds the bucket of spec at now: full, or with old's
// ratio of remaining to maximum tokens when it replaces old.
func newTokenBucket(spec *typev3.TokenBucket, now float64, old *tokenBucket) *tokenBucket {
	secs := int64(spec.GetFillInterval().AsDuration() / time.Second)
	// A zero secs divides by zero, as in Envoy: +Inf, or NaN for 0/0.
	rate := math.Abs(float64(spec.GetTokensPerFill().GetValue()) / float64(secs))
	if rate < minFillRate {
		rate = minFillRate
	}
	tb := &tokenBucket{spec: spec, max: float64(spec.GetMaxTokens()), rate: rate, t0: now}
	initial := tb.max
	if old != nil {
		initial = 0
		if ratio := old.remaining(now) / old.max; ratio > 0 {
			initial = math.Trunc(tb.max * ratio)
		}
	}
	if initial > 0 {
		tb.t0 -= initial / rate
	}
	return tb
}

// unlimited: Envoy's rate is infinite or NaN, so the bucket is always full.
func (tb *tokenBucket) unlimited() bool {
	return math.IsInf(tb.rate, 0) || math.IsNaN(tb.rate)
}

func (tb *tokenBucket) remaining(now float64) float64 {
	if tb.unlimited() {
		return tb.max
	}
	return snap(min(tb.max, (now-tb.t0)*tb.rate))
}

// take consumes one token if there is one.
func (tb *tokenBucket) take(now float64) bool {
	if tb.unlimited() {
		return tb.max >= 1
	}
	if now <= tb.t0 {
		return false
	}
	total := tb.remaining(now)
	if total < 1 {
		return false
	}
	tb.t0 = now - (total-1)/tb.rate
	return true
}

// snap takes x within 1e-9 of an integer as that integer.
func snap(x float64) float64 {
	if r := math.Round(x); math.Abs(x-r) < 1e-9 {
		return r
	}
	return x
}

// sameTokenBucket is Envoy's equality of token buckets; it ignores
// fill_interval's seconds.
func sameTokenBucket(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() &&
		a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}
