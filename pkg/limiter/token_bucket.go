package limiter

import (
	"fmt"
	"time"
)

// TokenBucketParams: a bucket of Capacity tokens refilled by RefillAmount
// tokens every RefillPeriod, continuously (sub-token remainders carried).
type TokenBucketParams struct {
	Capacity     int64
	RefillAmount int64
	RefillPeriod time.Duration // whole milliseconds, >= 1ms
}

var tokenBucketRules = bucketRules("token_bucket", tokenBucket, tokenBucketCharge,
	sketchRules{deficit: tokenBucketDeficit, state: tokenBucketState},
	func(capacity, refill int64, period time.Duration) Params {
		return TokenBucketParams{Capacity: capacity, RefillAmount: refill, RefillPeriod: period}
	})

// bucketRules are the rules of an algorithm that admits what a token
// bucket admits (token bucket, GCRA): certain decisions, denials that hold
// until their retry time, a burst, parameters (made by params) of the
// rate's bucket (bucketRate) refilled every Window, and the bucket's debt
// check.
func bucketRules(name string, stepFn func(State, int64, *Policy, int64) step,
	charge func(State, int64, *Policy, int64) (step, bool), sketch sketchRules,
	params func(capacity, refill int64, period time.Duration) Params) algorithmRules {
	return algorithmRules{
		name:        name,
		step:        stepFn,
		certainty:   Certain,
		denialsHold: true,
		burst:       true,
		params: func(r Rate) Params {
			capacity, refill := bucketRate(r)
			return params(capacity, refill, r.Window)
		},
		sketch:    sketch,
		charge:    charge,
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
// divisor of amount and period, so that refill arithmetic stays small, and
// the reduced pair is the algorithm arguments.
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
	if fill := p.limit * p.refillPeriodMs / p.refillAmount; fill >= maxDurationMillis {
		return &FieldError{Field: "capacity", Reason: fmt.Sprintf("takes longer than %dms to refill from empty; raise the refill rate or lower the capacity", maxDurationMillis)}
	}
	p.args = [2]int64{p.refillAmount, p.refillPeriodMs}
	return nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// tokenBucket: State.Epoch is the last refill time (ms), State.Level the
// tokens left, State.Carry the sub-token refill remainder; a bucket in debt
// (ChargeAlways) is stored as the tokens it holds at a refill time after
// now (tokenBucketCharge).
func tokenBucket(st State, now int64, p *Policy, cost int64) step {
	capacity, amount, period := p.limit, p.refillAmount, p.refillPeriodMs
	tokens, rem := bucketAt(st, now, p)
	s := step{allowed: cost <= tokens}
	if s.allowed {
		s.remainingBefore, s.resetAtBefore = tokens, now+fullTime(capacity, tokens, rem, amount, period)
		tokens -= cost
	} else {
		s.retryAfter = CeilDiv((cost-tokens)*period-rem, amount)
	}
	fullAfter := fullTime(capacity, tokens, rem, amount, period)
	s.remaining = max(0, tokens)
	s.resetAt = now + fullAfter
	if s.allowed {
		s.epoch, s.level, s.carry = now, tokens, rem
		s.ttl = fullAfter + p.CleanupGraceMillis()
	}
	return s
}

// bucketAt is the bucket of st refilled up to now: its tokens (below 0 in
// debt) and the sub-token remainder in [0, period).
func bucketAt(st State, now int64, p *Policy) (tokens, rem int64) {
	capacity, amount, period := p.limit, p.refillAmount, p.refillPeriodMs
	if !st.Exists {
		return capacity, 0
	}
	tokens, rem = st.Level, st.Carry
	if tokens >= capacity {
		// A lowered capacity can leave more stored tokens than it: full.
		return capacity, 0
	}
	if st.Epoch > now {
		// In debt until the stored refill time: the units it lacks now,
		// at most a whole debt (a farther time is not ours to trust; nor
		// is a debt of nothing: empty).
		debt := min(st.Epoch-now, CeilDiv(p.Ceiling()*period, amount))*amount - (tokens*period + rem)
		debt = min(debt, (p.Ceiling()-capacity)*period)
		if debt <= 0 {
			return 0, 0
		}
		if r := debt % period; r != 0 {
			return -(debt/period + 1), period - r
		}
		return -(debt / period), 0
	}
	elapsed := now - st.Epoch
	var fullAfter int64
	if missing := (capacity-tokens)*period - rem; missing > 0 {
		fullAfter = CeilDiv(missing, amount)
	}
	// Compare before multiplying: a long idle time never overflows.
	if elapsed >= fullAfter {
		return capacity, 0
	}
	units := elapsed*amount + rem
	return tokens + units/period, units % period
}

// tokenBucketCharge takes cost tokens from the bucket at now, at most down
// to the debt bound (capacity * DebtFactor below empty). A bucket in debt
// is stored empty, or with the tokens of less than one refill step, at the
// first whole ms its refill brings it there: the refill time after now.
func tokenBucketCharge(st State, now int64, p *Policy, cost int64) (step, bool) {
	capacity, amount, period := p.limit, p.refillAmount, p.refillPeriodMs
	tokens, rem := bucketAt(st, now, p)
	units := tokens*period + rem
	floor := -(p.Ceiling() - capacity) * period
	units = max(units-cost*period, min(units, floor))
	var s step
	s.epoch, s.level, s.carry = bucketState(units, now, p)
	s.ttl = s.epoch - now + fullTime(capacity, s.level, s.carry, amount, period) + p.CleanupGraceMillis()
	return s, true
}

// fullTime is how long a bucket of tokens (plus rem sub-token units) takes to
// fill up to capacity.
func fullTime(capacity, tokens, rem, amount, period int64) int64 {
	if missing := (capacity-tokens)*period - rem; missing > 0 {
		return CeilDiv(missing, amount)
	}
	return 0
}

// tokenBucketDeficit is the capacity minus the tokens of st at now (its
// refill applied), in units of 1/period token, a debt included (at most
// the Ceiling's); a lowered capacity can leave more tokens than it: 0.
func tokenBucketDeficit(st State, now int64, p *Policy) int64 {
	tokens, rem := bucketAt(st, now, p)
	return min(max(0, (p.limit-tokens)*p.refillPeriodMs-rem), p.Ceiling()*p.refillPeriodMs)
}

// bucketDebtCheck is the capacity rule of TokenBucketParams.apply for a
// bucket that may fall ceiling - capacity below empty: the whole range
// times the period, and the time to refill it, stay exact.
func bucketDebtCheck(p *Policy, ceiling int64) error {
	if ceiling > (MaxSafeInteger-p.refillAmount)/p.refillPeriodMs {
		return &FieldError{Field: "capacity", Reason: "times two (charge always) times the refill period (in ms, reduced by the refill rate) exceeds 2^53-1"}
	}
	if ceiling*p.refillPeriodMs/p.refillAmount >= maxDurationMillis {
		return &FieldError{Field: "capacity", Reason: fmt.Sprintf("times two (charge always) takes longer than %dms to refill", maxDurationMillis)}
	}
	return nil
}

// tokenBucketState is the bucket refilled at now that misses d units.
func tokenBucketState(d, now int64, p *Policy) (epoch, level, carry int64) {
	return bucketState(p.limit*p.refillPeriodMs-d, now, p)
}

// bucketState is the state of a bucket holding units (1/period tokens) at
// now: below 0, a bucket in debt, stored as the bucket it is at the first
// whole ms its refill brings it to 0 or more, at most one unit short of
// full there (a refill faster than the capacity per ms is full at that
// time, which stored tokens at capacity would not say: bucketAt reads them
// as full now).
func bucketState(units, now int64, p *Policy) (epoch, level, carry int64) {
	epoch = now
	if units < 0 {
		q := CeilDiv(-units, p.refillAmount)
		epoch, units = now+q, min(q*p.refillAmount+units, p.limit*p.refillPeriodMs-1)
	}
	return epoch, units / p.refillPeriodMs, units % p.refillPeriodMs
}
