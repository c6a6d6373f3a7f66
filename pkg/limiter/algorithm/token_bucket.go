package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

var tokenBucketRules = rules{step: tokenBucket, charge: tokenBucketCharge, refund: tokenBucketRefund,
	sketch: sketchRules{deficit: tokenBucketDeficit, state: tokenBucketState}}

// tokenBucket: State.Epoch is the last refill time (ms), State.Level the
// tokens left, State.Carry the sub-token refill remainder; a bucket in debt
// (ChargeAlways) is stored as the tokens it holds at a refill time after
// now (tokenBucketCharge).
func tokenBucket(st State, now int64, p *limiter.Policy, capacity, cost int64) step {
	amount, period := p.Refill()
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
func bucketAt(st State, now int64, p *limiter.Policy) (tokens, rem int64) {
	capacity := p.Limit()
	amount, period := p.Refill()
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
func tokenBucketCharge(st State, now int64, p *limiter.Policy, cost int64) (step, bool) {
	capacity := p.Limit()
	amount, period := p.Refill()
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
func tokenBucketDeficit(st State, now int64, p *limiter.Policy) int64 {
	tokens, rem := bucketAt(st, now, p)
	_, period := p.Refill()
	return min(max(0, (p.Limit()-tokens)*period-rem), p.Ceiling()*period)
}

// tokenBucketState is the bucket refilled at now that misses d units.
func tokenBucketState(d, now int64, p *limiter.Policy) (epoch, level, carry int64) {
	_, period := p.Refill()
	return bucketState(p.Limit()*period-d, now, p)
}

// bucketState is the state of a bucket holding units (1/period tokens) at
// now: below 0, a bucket in debt, stored as the bucket it is at the first
// whole ms its refill brings it to 0 or more, at most one unit short of
// full there (a refill faster than the capacity per ms is full at that
// time, which stored tokens at capacity would not say: bucketAt reads them
// as full now).
func bucketState(units, now int64, p *limiter.Policy) (epoch, level, carry int64) {
	amount, period := p.Refill()
	epoch = now
	if units < 0 {
		q := CeilDiv(-units, amount)
		epoch, units = now+q, min(q*amount+units, p.Limit()*period-1)
	}
	return epoch, units / period, units % period
}

// tokenBucketRefund gives back cost tokens taken at at when the bucket was
// written at or after at: the bucket refilled to now gains them, at most
// up to its capacity (a bucket in debt owes them less).
func tokenBucketRefund(st State, now int64, p *limiter.Policy, cost, at int64) State {
	if st.Epoch < at {
		return st
	}
	_, period := p.Refill()
	tokens, rem := bucketAt(st, now, p)
	units := min(tokens*period+rem+cost*period, p.Limit()*period)
	st.Epoch, st.Level, st.Carry = bucketState(units, now, p)
	return st
}
