package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// charge is Check of a ChargeAlways policy whose algorithm step denied
// cost (denial is that reply): the cost is recorded anyway, up to the
// Ceiling, and the reply tells what is left after it and when one unit
// fits again. uncommitted is the denial as it reads without the charge
// (what a check or probe of the limit answers).
func charge(r *rules, st State, now int64, p *limiter.Policy, cost int64, denial Reply) (next State, reply, uncommitted Reply, write bool) {
	record := r.charge
	if record == nil {
		record = chargeToCeiling
	}
	c, ok := record(st, now, p, cost)
	next = st
	if ok {
		next = c.stateAfter(st, now, p)
	}
	// The reply is what one more unit would meet.
	after := r.step(next, now, p, p.Limit(), 1)
	reply = denial
	reply.Remaining = max(0, after.remaining)
	reply.RetryAfterMs = max(1, after.retryAfter)
	reply.ResetAtMs = after.resetAt
	if after.allowed {
		reply.ResetAtMs = after.resetAtBefore
	}
	return next, reply, denial, ok
}

// chargeToCeiling is the charge of an algorithm whose limit only bounds
// the usage it compares (the windows, the sliding log, GCRA's tolerance):
// its own step with the Ceiling as the limit, taking cost or, when that
// does not fit, what room is left under the ceiling (nothing: ok false).
func chargeToCeiling(st State, now int64, p *limiter.Policy, cost int64) (s step, ok bool) {
	step, ceiling := rulesOf(p).step, p.Ceiling()
	if s = step(st, now, p, ceiling, cost); s.allowed {
		return s, true
	}
	if s.remaining <= 0 {
		return s, false
	}
	return step(st, now, p, ceiling, s.remaining), true
}
