package limiter

import (
	"errors"
	"time"
)

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
var gcraRules = bucketRules("gcra", gcra, nil,
	sketchRules{deficit: gcraDeficit, state: gcraState},
	func(burst, limit int64, period time.Duration) Params {
		return GCRAParams{Burst: burst, Limit: limit, Period: period}
	})

func (GCRAParams) algorithm() Algorithm { return GCRA }

func (prm GCRAParams) divided(n int64) Params {
	prm.Burst = share(prm.Burst, n)
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the token bucket's rules with burst as the capacity, limit as the
// refill amount and period as the refill period; the arguments are the
// rate reduced by its greatest common divisor, (amount, period): the
// emission interval is period/amount ms.
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

// gcraDeficit is how far the theoretical arrival time of st is ahead of now,
// in the policy's scaled units (amount per ms, period per unit of cost):
// 0 when it is not ahead, at most Ceiling * period (burst * period but for
// a debt; a TAT further ahead, left by a lowered burst, counts as that).
func gcraDeficit(st State, now int64, p *Policy) int64 {
	return gcraAhead(st, now, p, p.Ceiling())
}

// gcraAhead is gcraDeficit at most ceiling * period: State.Epoch is the
// TAT's whole ms, State.Carry its fraction in units (below amount; a larger
// one, left by another rate, counts as amount - 1).
func gcraAhead(st State, now int64, p *Policy, ceiling int64) int64 {
	if !st.Exists || st.Epoch < now {
		return 0
	}
	amount, full := p.refillAmount, ceiling*p.refillPeriodMs
	dms := st.Epoch - now
	// Compare before multiplying: a far TAT never overflows.
	if dms > full/amount {
		return full
	}
	return min(dms*amount+min(st.Carry, amount-1), full)
}

// gcraState is the state whose TAT is deficit units after now.
func gcraState(deficit, now int64, p *Policy) (epoch, level, carry int64) {
	return now + deficit/p.refillAmount, 0, deficit % p.refillAmount
}

// gcra: State.Epoch and State.Carry are the theoretical arrival time (TAT),
// Epoch + Carry/amount ms; State.Level is 0. A request of cost c moves the
// TAT to max(TAT, now) + c*I (I = period/amount ms) and is admitted iff that
// is at most now + burst*I. Every comparison is in units of 1/amount ms.
func gcra(st State, now int64, p *Policy, cost int64) step {
	amount, period := p.refillAmount, p.refillPeriodMs
	full := p.limit * period
	d := gcraAhead(st, now, p, p.Ceiling())
	s := step{allowed: cost*period <= full-d}
	// max: a TAT in debt (ChargeAlways) leaves less than nothing.
	before, resetBefore := max(0, full-d)/period, now+CeilDiv(d, amount)
	if !s.allowed {
		s.remaining, s.resetAt = before, resetBefore
		s.retryAfter = CeilDiv(cost*period-(full-d), amount)
		return s
	}
	s.remainingBefore, s.resetAtBefore = before, resetBefore
	d += cost * period
	fullAfter := CeilDiv(d, amount)
	s.remaining, s.resetAt = (full-d)/period, now+fullAfter
	s.epoch, s.level, s.carry = gcraState(d, now, p)
	s.ttl = fullAfter + p.CleanupGraceMillis()
	return s
}
