package limiter

import (
	"errors"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// The parameters of each algorithm: their rules (algorithms), their
// validation into a Policy (apply) and their share (divided). The steps
// that apply them are pkg/limiter/algorithm's.

// FixedWindowParams: at most Limit units per epoch-aligned Window, or, with
// a Calendar, per calendar period of a time zone.
type FixedWindowParams struct {
	Limit  int64
	Window time.Duration // whole milliseconds, >= 1ms
	// Calendar, when set, makes the windows calendar periods (Window is
	// then only the unit's nominal length, as Policy.WindowMillis reports
	// it). (Optional)
	Calendar *calendar.Calendar
}

var fixedWindowRules = algorithmRules{
	name:        "fixed_window",
	certainty:   Certain,
	denialsHold: true,
	params: func(r Rate) Params {
		return FixedWindowParams{Limit: r.Limit, Window: r.Window, Calendar: r.Calendar}
	},
}

func (FixedWindowParams) algorithm() Algorithm { return FixedWindow }

func (prm FixedWindowParams) divided(n int64) Params {
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the window rule (applyWindow), and a calendar's unit and zone.
func (prm FixedWindowParams) apply(p *Policy) error {
	if c := prm.Calendar; c != nil {
		if c.Unit < calendar.Minute || c.Unit > calendar.Year {
			return &FieldError{Field: "calendar", Reason: fmt.Sprintf("unit %d is not minute, hour, day, week, month or year", c.Unit)}
		}
		if c.Location == nil {
			return &FieldError{Field: "time_zone", Reason: "is required for a calendar window"}
		}
		// Of the same unit and zone, with no memory of periods.
		p.calendar = &calendar.Calendar{Unit: c.Unit, Location: c.Location}
	}
	return applyWindow(p, prm.Limit, prm.Window)
}

// SlidingWindowParams: at most Limit units in any Window, estimated from the
// current and previous epoch-aligned windows.
type SlidingWindowParams struct {
	Limit  int64
	Window time.Duration // whole milliseconds, >= 1ms
}

// SlidingScale is the fixed-point scale of the sliding-window weight.
const SlidingScale int64 = 1_000_000

var slidingWindowRules = algorithmRules{
	name:      "sliding_window",
	certainty: Approximate,
	params: func(r Rate) Params {
		return SlidingWindowParams{Limit: r.Limit, Window: r.Window}
	},
	// The weighted estimate multiplies counts up to the ceiling by
	// SlidingScale.
	debtCheck: ceilingAtMost(MaxSafeInteger/SlidingScale, "a sliding window"),
}

func (SlidingWindowParams) algorithm() Algorithm { return SlidingWindow }

func (prm SlidingWindowParams) divided(n int64) Params {
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the window rule (applyWindow), and the weighted estimate
// multiplies counts and window offsets by SlidingScale: both products must
// stay exact.
func (prm SlidingWindowParams) apply(p *Policy) error {
	if err := applyWindow(p, prm.Limit, prm.Window); err != nil {
		return err
	}
	if p.limit > MaxSafeInteger/SlidingScale {
		return &FieldError{Field: "limit", Reason: fmt.Sprintf("must be at most %d for a sliding window", MaxSafeInteger/SlidingScale)}
	}
	if p.windowMs > MaxSafeInteger/SlidingScale {
		return &FieldError{Field: "window", Reason: fmt.Sprintf("must be at most %dms for a sliding window", MaxSafeInteger/SlidingScale)}
	}
	return nil
}

// TokenBucketParams: a bucket of Capacity tokens refilled by RefillAmount
// tokens every RefillPeriod, continuously (sub-token remainders carried).
type TokenBucketParams struct {
	Capacity     int64
	RefillAmount int64
	RefillPeriod time.Duration // whole milliseconds, >= 1ms
}

var tokenBucketRules = bucketRules("token_bucket", func(capacity, refill int64, period time.Duration) Params {
	return TokenBucketParams{Capacity: capacity, RefillAmount: refill, RefillPeriod: period}
})

// bucketRules are the rules of an algorithm that admits what a token
// bucket admits (token bucket, GCRA): certain decisions, denials that hold
// until their retry time, a burst, parameters (made by params) of the
// rate's bucket (bucketRate) refilled every Window, and the bucket's debt
// check.
func bucketRules(name string, params func(capacity, refill int64, period time.Duration) Params) algorithmRules {
	return algorithmRules{
		name:        name,
		certainty:   Certain,
		denialsHold: true,
		burst:       true,
		params: func(r Rate) Params {
			capacity, refill := bucketRate(r)
			return params(capacity, refill, r.Window)
		},
		debtCheck: bucketDebtCheck,
	}
}

// bucketRate is the bucket of a rate: Limit tokens refilled every Window, in
// a bucket of Burst (default Limit). A zero limit holds nothing, so it never
// admits; its refill amount only has to be valid. GCRA, which admits what
// this bucket admits, takes the same pair as its burst and limit.
func bucketRate(r Rate) (capacity, refill int64) {
	capacity, refill = r.Limit, r.Limit
	if r.Burst > 0 {
		capacity = r.Burst
	}
	if refill == 0 {
		capacity, refill = 0, 1
	}
	return capacity, refill
}

func (TokenBucketParams) algorithm() Algorithm { return TokenBucket }

func (prm TokenBucketParams) divided(n int64) Params {
	prm.Capacity = share(prm.Capacity, n)
	prm.RefillAmount = share(prm.RefillAmount, n)
	return prm
}

// apply: capacity in [0, 2^53-1], refill amount in [1, 2^53-1], refill
// period in [1ms, ten years]; the rate is reduced by the greatest common
// divisor of amount and period, so that refill arithmetic stays small.
func (prm TokenBucketParams) apply(p *Policy) error {
	if err := limitField("capacity", prm.Capacity); err != nil {
		return err
	}
	if prm.RefillAmount < 1 || prm.RefillAmount > MaxSafeInteger {
		return &FieldError{Field: "refill_amount", Reason: fmt.Sprintf("must be between 1 and %d", MaxSafeInteger)}
	}
	if err := durationField("refill_period", prm.RefillPeriod, 1); err != nil {
		return err
	}
	p.limit, p.windowMs = prm.Capacity, prm.RefillPeriod.Milliseconds()
	g := gcd(prm.RefillAmount, p.windowMs)
	p.refillAmount, p.refillPeriodMs = prm.RefillAmount/g, p.windowMs/g
	// Refill arithmetic computes elapsed*amount + remainder with elapsed
	// capped at the time to fill the whole bucket, so it is bounded by
	// capacity*period + amount.
	if p.limit > (MaxSafeInteger-p.refillAmount)/p.refillPeriodMs {
		return &FieldError{Field: "capacity", Reason: "times the refill period (in ms, reduced by the refill rate) exceeds 2^53-1; lower the capacity or shorten the period"}
	}
	// Time to fill an empty bucket bounds retry-after, reset-at and the
	// state TTL; keep it within the duration bound so that now + it stays
	// an exact integer.
	if fill := p.limit * p.refillPeriodMs / p.refillAmount; fill >= MaxDurationMillis {
		return &FieldError{Field: "capacity", Reason: fmt.Sprintf("takes longer than %dms to refill from empty; raise the refill rate or lower the capacity", MaxDurationMillis)}
	}
	return nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// bucketDebtCheck is the capacity rule of TokenBucketParams.apply for a
// bucket that may fall ceiling - capacity below empty: the whole range
// times the period, and the time to refill it, stay exact.
func bucketDebtCheck(p *Policy, ceiling int64) error {
	if ceiling > (MaxSafeInteger-p.refillAmount)/p.refillPeriodMs {
		return &FieldError{Field: "capacity", Reason: "times two (charge always) times the refill period (in ms, reduced by the refill rate) exceeds 2^53-1"}
	}
	if ceiling*p.refillPeriodMs/p.refillAmount >= MaxDurationMillis {
		return &FieldError{Field: "capacity", Reason: fmt.Sprintf("times two (charge always) takes longer than %dms to refill", MaxDurationMillis)}
	}
	return nil
}

// GCRAParams: the generic cell rate algorithm, Limit units per Period with
// a tolerance of Burst units at once. Its emission interval is
// Period/Limit; it admits exactly what a token bucket of capacity Burst
// refilled by Limit every Period admits (docs/algorithms.md).
type GCRAParams struct {
	Burst  int64
	Limit  int64
	Period time.Duration // whole milliseconds, >= 1ms
}

// Its burst and limit are the token bucket's capacity and refill amount
// (bucketRate): Limit per Window with a burst of Burst (default Limit).
var gcraRules = bucketRules("gcra", func(burst, limit int64, period time.Duration) Params {
	return GCRAParams{Burst: burst, Limit: limit, Period: period}
})

func (GCRAParams) algorithm() Algorithm { return GCRA }

func (prm GCRAParams) divided(n int64) Params {
	prm.Burst = share(prm.Burst, n)
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the token bucket's rules with burst as the capacity, limit as the
// refill amount and period as the refill period: the emission interval is
// period/amount ms of the reduced rate (Policy.Refill).
func (prm GCRAParams) apply(p *Policy) error {
	err := TokenBucketParams{Capacity: prm.Burst, RefillAmount: prm.Limit, RefillPeriod: prm.Period}.apply(p)
	var fe *FieldError
	if errors.As(err, &fe) {
		switch fe.Field {
		case "capacity":
			fe.Field = "burst"
		case "refill_amount":
			fe.Field = "limit"
		case "refill_period":
			fe.Field = "period"
		}
	}
	return err
}

// SlidingLogParams: at most Limit units in the trailing Window, counted
// exactly from a log of the admitted hits.
type SlidingLogParams struct {
	Limit  int64         // 0..MaxSlidingLogLimit
	Window time.Duration // whole milliseconds, >= 1ms
}

// MaxSlidingLogLimit bounds a sliding log's limit, and so its log: a log
// holds at most one entry per admitted unit in the window, and every
// request reads the whole log (docs/algorithms.md gives the Redis time of a
// full log).
const MaxSlidingLogLimit = 1000

var slidingLogRules = algorithmRules{
	name:        "sliding_log",
	certainty:   Certain,
	denialsHold: true,
	params: func(r Rate) Params {
		return SlidingLogParams{Limit: r.Limit, Window: r.Window}
	},
	// The log of a charge holds up to the ceiling's hits.
	debtCheck: ceilingAtMost(MaxSlidingLogLimit, "sliding_log"),
}

func (SlidingLogParams) algorithm() Algorithm { return SlidingLog }

func (prm SlidingLogParams) divided(n int64) Params {
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the window rule (applyWindow) with the limit at most
// MaxSlidingLogLimit.
func (prm SlidingLogParams) apply(p *Policy) error {
	if prm.Limit > MaxSlidingLogLimit {
		return &FieldError{Field: "limit", Reason: fmt.Sprintf("must be at most %d for sliding_log (every request reads the whole log)", MaxSlidingLogLimit)}
	}
	return applyWindow(p, prm.Limit, prm.Window)
}
