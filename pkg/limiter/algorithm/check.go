package algorithm

import (
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Apply evaluates one request of cost units against the stored state st at
// store time serverNowMs (Unix milliseconds, 0 <= serverNowMs <= 2^53-1),
// exactly as docs/algorithms.md specifies and as the Lua programs of pkg/lua
// do. It is a pure function: it reads no clock and keeps no state.
//
// next is the state to store when write is true; when write is false (denied,
// BLOCKED, CLOCK_UNSAFE, STATE_INCOMPATIBLE) next equals st and nothing must
// be written, except the offence of a policy with a Penalty
// (PenaltyRecorded). A ChargeAlways policy's denial writes too: the charge,
// a DENIED reply with the cost recorded (see limiter.Request.Charges).
// reply holds the seven reply fields. cost must pass
// limiter.Request.Validate; Apply never returns StatusInvalid for a rate
// algorithm. It knows nothing of reservations: a request of a reserving
// policy goes through CheckRequest.
func Apply(st State, serverNowMs int64, p *limiter.Policy, cost int64) (next State, reply Reply, write bool) {
	next, reply, _, write = Check(st, serverNowMs, p, cost)
	return next, reply, write
}

// Check is Apply that also returns uncommitted: the reply as it reads when the
// request is allowed but its cost is not taken (its batch did not commit):
// ALLOWED, remaining and reset-at of st before the cost; for a charge
// denied, the denial without the charge (what a check or probe answers).
// For every other status uncommitted equals reply. The batch stores (memory
// and the batch Lua program) check every request with it, then write next
// only on commit, or whatever the batch decides for a request that
// Charges.
func Check(st State, serverNowMs int64, p *limiter.Policy, cost int64) (next State, reply, uncommitted Reply, write bool) {
	rules := rulesOf(p)
	if rules == nil { // a concurrency policy: see Lease
		r := refusal(StatusInvalid, serverNowMs, p)
		r.Limit = 0
		return st, r, r, false
	}
	now, r, ok := admit(st, serverNowMs, p)
	if !ok {
		return st, r, r, false
	}
	return checkAt(rules, st, serverNowMs, now, p, cost, p.ChargeAlways())
}

// admit is what every step of a rate policy checks first, on st at store
// time serverNowMs: the effective now, or the refusal when the state is not
// the policy's (never a silent reset) or the clock stepped back too far.
func admit(st State, serverNowMs int64, p *limiter.Policy) (now int64, refused Reply, ok bool) {
	// 1. Compatibility: never a silent reset.
	if st.Exists && (st.Schema != StateSchema || st.Algorithm != p.Algorithm() ||
		st.PolicyID != p.ID() || st.Revision != p.Revision()) {
		return 0, refusal(StatusStateIncompatible, serverNowMs, p), false
	}
	// 2. Clock: clamp a small backward step, refuse a large one.
	now = serverNowMs
	if st.Exists && now < st.LastObservedMs {
		if st.LastObservedMs-now > p.MaxClockRegressionMillis() {
			return 0, refusal(StatusClockUnsafe, serverNowMs, p), false
		}
		now = st.LastObservedMs
	}
	// A sliding log or reservations that cannot be ours.
	if st.Exists && (!validLog(st, p) || !validReserved(st, p)) {
		return 0, refusal(StatusStateIncompatible, serverNowMs, p), false
	}
	return now, Reply{}, true
}

// checkAt is Check at the effective now admit returned, cost recorded up
// to the Ceiling when the step denies it and charges is set (a
// ChargeAlways policy's request, a settle's excess).
func checkAt(rules *rules, st State, serverNowMs, now int64, p *limiter.Policy, cost int64, charges bool) (next State, reply, uncommitted Reply, write bool) {
	// 3. The algorithm (a blocked subject's reset-at is read from it).
	pn := p.Penalty()
	s := rules.step(st, now, p, p.Limit(), cost)
	reply = Reply{
		Status:         StatusDenied,
		ServerNowMs:    serverNowMs,
		EffectiveNowMs: now,
		Limit:          p.Limit(),
		Remaining:      s.remaining,
		RetryAfterMs:   s.retryAfter,
		ResetAtMs:      s.resetAt,
	}
	// 4. The penalty box: a blocked subject is denied until the block
	// ends, consumes nothing and is no new offence. Its retry and reset
	// are never before the limit itself admits the cost: a client that
	// comes back when the block ends while the limit still denies would
	// only earn a new offence.
	if blocked(pn, st, now) {
		left := st.PenaltyUntilMs - now
		retry, resetAt := left, s.resetAt
		if s.allowed {
			resetAt = s.resetAtBefore
		} else {
			retry = max(retry, s.retryAfter)
		}
		r := Reply{Status: StatusBlocked, ServerNowMs: serverNowMs, EffectiveNowMs: now, Limit: p.Limit(),
			RetryAfterMs: retry, ResetAtMs: max(resetAt, now+retry), BlockLeftMs: left}
		return st, r, r, false
	}
	// 5. A denial consumes nothing. With a penalty it is an offence: next
	// holds the block (PenaltyRecorded) and reply waits for it; uncommitted
	// is the limit's own denial, for a store that does not record it.
	if !s.allowed {
		if charges {
			// Post-paid: recorded anyway (no penalty box, NewPolicy).
			return charge(rules, st, now, p, cost, reply)
		}
		if !pn.On() || !st.Exists {
			return st, reply, reply, false
		}
		level, block := offence(pn, st, now)
		next = st
		next.PenaltyUntilMs, next.PenaltyLevel = now+block, level
		next.ExpiresAtMs = max(st.ExpiresAtMs, next.PenaltyUntilMs+pn.Decay.Milliseconds()+p.CleanupGraceMillis())
		uncommitted = reply
		reply.RetryAfterMs = max(reply.RetryAfterMs, block)
		reply.ResetAtMs = max(reply.ResetAtMs, next.PenaltyUntilMs)
		return next, reply, uncommitted, false
	}
	// 6. Allowed: write the new state with a finite TTL, which covers the
	// memory of a penalty.
	reply.Status = StatusAllowed
	uncommitted = reply
	uncommitted.Remaining, uncommitted.ResetAtMs = s.remainingBefore, s.resetAtBefore
	next = s.stateAfter(st, now, p)
	next.PenaltyUntilMs, next.PenaltyLevel = st.PenaltyUntilMs, st.PenaltyLevel
	if m := memoryUntil(pn, st); m != 0 {
		next.ExpiresAtMs = max(next.ExpiresAtMs, m+p.CleanupGraceMillis())
	}
	return next, reply, uncommitted, true
}

// refusal is the reply of CLOCK_UNSAFE and STATE_INCOMPATIBLE.
func refusal(status Status, serverNowMs int64, p *limiter.Policy) Reply {
	return Reply{Status: status, ServerNowMs: serverNowMs, EffectiveNowMs: serverNowMs, Limit: p.Limit()}
}

// step is what one algorithm decided: the verdict, the new state fields (used
// only when allowed), the reply fields it owns and the state TTL.
type step struct {
	allowed    bool
	epoch      int64
	level      int64
	carry      int64
	log        string
	remaining  int64
	retryAfter int64
	resetAt    int64
	ttl        int64
	// When allowed: remaining and reset-at before the cost is taken.
	remainingBefore, resetAtBefore int64
}

// stateAfter is the state s leaves for p at now, after st: s's fields, p's
// identity and s's TTL from now (no penalty fields).
func (s step) stateAfter(st State, now int64, p *limiter.Policy) State {
	return State{
		Exists:         true,
		Schema:         StateSchema,
		Algorithm:      p.Algorithm(),
		PolicyID:       p.ID(),
		Revision:       p.Revision(),
		LastObservedMs: max(st.LastObservedMs, now),
		Epoch:          s.epoch,
		Level:          s.level,
		Carry:          s.carry,
		Log:            s.log,
		ExpiresAtMs:    now + s.ttl,
	}
}

// OutcomeFromReply turns a reply of Apply or of a Lua program into the
// Outcome a Store returns: ALLOWED, DENIED and BLOCKED become an Evaluated
// decision from src (BLOCKED: a Blocked, Certain denial, only for a policy
// with a penalty box and with nothing remaining); CLOCK_UNSAFE an Unavailable outcome (CategoryClockUnsafe, nothing
// was changed); STATE_INCOMPATIBLE and INVALID an Incompatible outcome. A
// reply inconsistent with its status or with p (wrong limit, remaining out of
// [0, limit], an allow with a retry, a denial without one) is Incompatible
// with CategoryReplyMalformed: never an allow.
func OutcomeFromReply(p *limiter.Policy, r Reply, src limiter.Source) limiter.Outcome {
	switch r.Status {
	case StatusAllowed, StatusDenied, StatusBlocked:
		allowed := r.Status == StatusAllowed
		blocked := r.Status == StatusBlocked
		if blocked && (!p.Penalty().On() || r.Remaining != 0) {
			return limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("policy %s: BLOCKED reply (remaining %d) for a limit without a penalty or with units left: %w",
				p.ID(), r.Remaining, limiter.ErrReplyMalformed))
		}
		certainty := p.Certainty()
		if blocked {
			certainty = limiter.Certain
		}
		if r.Limit != p.Limit() || r.Remaining < 0 || r.Remaining > r.Limit || r.ResetAtMs < 0 ||
			(allowed && r.RetryAfterMs != 0) || (!allowed && r.RetryAfterMs <= 0) {
			return limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("policy %s: %s reply (limit %d, remaining %d, retry %dms, reset %d): %w",
				p.ID(), r.Status, r.Limit, r.Remaining, r.RetryAfterMs, r.ResetAtMs, limiter.ErrReplyMalformed))
		}
		var blockedFor time.Duration
		if blocked {
			// Every store gives the block's end, within the retry.
			left := r.BlockLeftMs
			if left < 1 || left > r.RetryAfterMs {
				return limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("policy %s: BLOCKED reply whose block (%dms) is not within its retry (%dms): %w",
					p.ID(), left, r.RetryAfterMs, limiter.ErrReplyMalformed))
			}
			blockedFor = time.Duration(left) * time.Millisecond
		}
		return limiter.EvaluatedOutcome(limiter.Decision{
			Allowed:        allowed,
			Limit:          r.Limit,
			Remaining:      r.Remaining,
			RetryAfter:     time.Duration(r.RetryAfterMs) * time.Millisecond,
			ResetAt:        time.UnixMilli(r.ResetAtMs),
			PolicyID:       p.ID(),
			PolicyRevision: p.Revision(),
			Source:         src,
			Certainty:      certainty,
			Blocked:        blocked,
			BlockedFor:     blockedFor,
			HoldAt:         holdAt(r),
			Reserved:       r.ReservedUnits,
			Expired:        r.Expired,
		})
	case StatusClockUnsafe:
		return limiter.UnavailableOutcome(limiter.ClockUnsafeRetryAfter, limiter.CategoryClockUnsafe, fmt.Errorf("policy %s: %w", p.ID(), limiter.ErrClockUnsafe))
	case StatusStateIncompatible:
		return limiter.IncompatibleOutcome(limiter.CategoryStateIncompatible, fmt.Errorf("policy %s: %w", p.ID(), limiter.ErrStateIncompatible))
	case StatusInvalid:
		return limiter.IncompatibleOutcome(limiter.CategoryProgramInvalid, fmt.Errorf("policy %s: %w", p.ID(), limiter.ErrProgramInvalid))
	}
	return limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("policy %s: status %d: %w", p.ID(), r.Status, limiter.ErrReplyMalformed))
}

// holdAt is Decision.HoldAt of r: its reservation's identity, the zero
// time when it holds none.
func holdAt(r Reply) time.Time {
	if r.HoldAtMs == 0 || r.Status != StatusAllowed {
		return time.Time{}
	}
	return time.UnixMilli(r.HoldAtMs)
}

// LeaseDecision is the Outcome of one lease request from Lease's reply r
// (OutcomeFromReply), its Decision.Consumed set when a take consumed
// (write). A store's lease evaluation answers each request with it.
func LeaseDecision(req *limiter.Request, r Reply, write bool, src limiter.Source) limiter.Outcome {
	o := OutcomeFromReply(req.Policy, r, src)
	if o.Kind == limiter.Evaluated && req.Lease == limiter.LeaseTake {
		o.Decision.Consumed = write
	}
	return o
}
