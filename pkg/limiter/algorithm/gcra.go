package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// GCRA admits exactly what a token bucket of capacity burst refilled by
// limit every period admits (docs/algorithms.md): the same bucket's
// parameters (limiter.Policy.Refill).
var gcraRules = rules{step: gcra, refund: gcraRefund, sketch: sketchRules{deficit: gcraDeficit, state: gcraState}}

// gcraDeficit is how far the theoretical arrival time of st is ahead of now,
// in the policy's scaled units (amount per ms, period per unit of cost):
// 0 when it is not ahead, at most Ceiling * period (burst * period but for
// a debt; a TAT further ahead, left by a lowered burst, counts as that).
func gcraDeficit(st State, now int64, p *limiter.Policy) int64 {
	return gcraAhead(st, now, p, p.Ceiling())
}

// gcraAhead is gcraDeficit at most ceiling * period: State.Epoch is the
// TAT's whole ms, State.Carry its fraction in units (below amount; a larger
// one, left by another rate, counts as amount - 1).
func gcraAhead(st State, now int64, p *limiter.Policy, ceiling int64) int64 {
	if !st.Exists || st.Epoch < now {
		return 0
	}
	amount, period := p.Refill()
	full := ceiling * period
	dms := st.Epoch - now
	// Compare before multiplying: a far TAT never overflows.
	if dms > full/amount {
		return full
	}
	return min(dms*amount+min(st.Carry, amount-1), full)
}

// gcraState is the state whose TAT is deficit units after now.
func gcraState(deficit, now int64, p *limiter.Policy) (epoch, level, carry int64) {
	amount, _ := p.Refill()
	return now + deficit/amount, 0, deficit % amount
}

// gcra: State.Epoch and State.Carry are the theoretical arrival time (TAT),
// Epoch + Carry/amount ms; State.Level is 0. A request of cost c moves the
// TAT to max(TAT, now) + c*I (I = period/amount ms) and is admitted iff that
// is at most now + burst*I. Every comparison is in units of 1/amount ms.
func gcra(st State, now int64, p *limiter.Policy, limit, cost int64) step {
	amount, period := p.Refill()
	full := limit * period
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

// gcraRefund gives back cost taken at at when the state was written
// (LastObservedMs) at or after at: the TAT moves back by cost emission
// intervals, not before that write (then with no fraction).
func gcraRefund(st State, _ int64, p *limiter.Policy, cost, at int64) State {
	if st.LastObservedMs < at {
		return st
	}
	amount, period := p.Refill()
	x := cost * period
	tat, f := st.Epoch-x/amount, st.Carry-x%amount
	if f < 0 {
		tat, f = tat-1, f+amount
	}
	if tat < st.LastObservedMs {
		tat, f = st.LastObservedMs, 0
	}
	st.Epoch, st.Carry = tat, f
	return st
}
