package descriptors

import (
	"errors"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// limitSpec is a validated rate_limit block, before the policy ID is known.
type limitSpec struct {
	unit      Unit
	mult      uint32
	rpu       uint32
	unlimited bool
	algorithm limiter.Algorithm
	burst     uint32
	failure   limiter.FailureMode
	revision  uint32
	headers   HeaderMode
	// calendar makes a fixed window a calendar period (nil: epoch-aligned);
	// zone is its time_zone as configured.
	calendar *calendar.Calendar
	zone     string
	penalty  limiter.Penalty
	// leaseTTL is a concurrency limit's lease TTL (algorithm
	// limiter.Concurrency, rpu its limit).
	leaseTTL time.Duration
	charge   limiter.Charge
	reserve  limiter.Reserve
}

// checkLimit validates one rate_limit block on its own (the combinations
// that depend on the descriptor are checked by the compiler).
func (c *compiler) checkLimit(rl *rawLimit, what string) (limitSpec, bool) {
	ok := true
	bad := func(p pos, format string, args ...any) {
		c.ps.add(c.file, p.line, p.col, what+": "+format, args...)
		ok = false
	}
	ls := limitSpec{mult: 1, algorithm: limiter.FixedWindow, revision: limiter.DefaultRevision, rpu: rl.rpu, burst: rl.burst, unlimited: rl.unlimited}
	if rl.unlimited {
		for _, f := range []struct {
			p    pos
			name string
		}{{rl.unitPos, "unit"}, {rl.rpuPos, "requests_per_unit"}, {rl.unitMultiplierPos, "unit_multiplier"},
			{rl.algorithmPos, "algorithm"}, {rl.burstPos, "burst"}, {rl.failureModePos, "failure_mode"},
			{rl.revisionPos, "revision"}, {rl.headersPos, "headers"}, {rl.calendarPos, "calendar"}, {rl.timeZonePos, "time_zone"},
			{rl.penaltyPos, "penalty"}, {rl.concurrencyPos, "concurrency"}, {rl.leaseTTLPos, "lease_ttl"}, {rl.chargePos, "charge"}, {rl.reservePos, "reserve"}} {
			if f.p.set() {
				bad(f.p, "%s is not allowed with unlimited: true (an unlimited rule never limits)", f.name)
			}
		}
		return ls, ok
	}
	if rl.concurrencyPos.set() || rl.leaseTTLPos.set() {
		c.checkConcurrency(rl, &ls, bad)
	} else if !rl.unitPos.set() {
		bad(rl.pos, "unit is required (second, minute, hour, day, week, month or year)")
	} else if u, valid := parseUnit(rl.unit); valid {
		ls.unit = u
	} else {
		bad(rl.unitPos, "invalid rate limit unit %q (expected second, minute, hour, day, week, month or year)", truncate(rl.unit, 40))
	}
	if rl.unitMultiplierPos.set() && rl.unitMultiplier > 0 {
		ls.mult = rl.unitMultiplier
	}
	if rl.algorithmPos.set() {
		a, err := limiter.ParseAlgorithm(rl.algorithm)
		if err != nil {
			bad(rl.algorithmPos, "algorithm %q is not one of %s", truncate(rl.algorithm, 40), limiter.AlgorithmNames())
		} else {
			ls.algorithm = a
		}
	}
	if rl.burstPos.set() {
		if !ls.algorithm.TakesBurst() {
			bad(rl.burstPos, "burst is only valid with algorithm: %s", burstAlgorithms())
		} else if rl.rpu == 0 {
			bad(rl.burstPos, "burst with requests_per_unit 0: a zero limit denies every request; remove burst or set a rate")
		}
	}
	ls.failure = c.defaultFailure
	if rl.failureModePos.set() {
		if m, err := limiter.ParseFailureMode(rl.failureMode); err != nil {
			bad(rl.failureModePos, "failure_mode %q is not one of closed, open, local", truncate(rl.failureMode, 40))
		} else {
			ls.failure = m
		}
	}
	if rl.revisionPos.set() && rl.revision > 0 {
		ls.revision = rl.revision
	}
	if rl.headersPos.set() {
		h, valid := ParseHeaderMode(rl.headers)
		if !valid {
			bad(rl.headersPos, "headers %q is not one of full, retry_after, none", truncate(rl.headers, 40))
		}
		ls.headers = h
	}
	if !c.checkCalendar(rl, &ls, bad) {
		ok = false
	}
	if pn, valid := checkPenalty(rl.penalty, bad); valid {
		ls.penalty = pn
	} else {
		ok = false
	}
	c.checkCharge(rl, &ls, bad)
	if r, valid := checkReserve(rl.reserve, bad); valid {
		ls.reserve = r
	} else {
		ok = false
	}
	// Check the arithmetic now, with a placeholder ID, so that the problem
	// points at this block (a named policy is then checked once).
	if ok {
		if _, err := ls.policy("x", false); err != nil {
			at := rl.pos
			var fe *limiter.FieldError
			if errors.As(err, &fe) && strings.HasPrefix(fe.Field, "penalty") {
				at = rl.penaltyPos
			}
			if fe != nil && fe.Field == "charge" && rl.chargePos.set() {
				at = rl.chargePos
			}
			if fe != nil && fe.Field == "reserve" {
				at = reserveAt(rl, fe.Reason)
			}
			bad(at, "%s", policyReason(err))
		}
	}
	return ls, ok
}

func policyReason(err error) string {
	var fe *limiter.FieldError
	if errors.As(err, &fe) {
		switch fe.Field {
		case "window", "refill_period", "period":
			return "the window (unit x unit_multiplier) is out of range: it " + fe.Reason
		case "capacity", "burst":
			return "burst (or requests_per_unit) " + fe.Reason
		case "penalty", "penalty.duration", "penalty.max_duration", "penalty.decay":
			return penaltyReason(fe)
		case "limit":
			return "requests_per_unit " + fe.Reason
		case "concurrency", "lease_ttl":
			return fe.Field + " " + fe.Reason
		}
		return fe.Field + " " + fe.Reason
	}
	return err.Error()
}

// policy builds the limiter policy of a limited rule.
func (ls limitSpec) policy(id string, shadow bool) (*limiter.Policy, error) {
	window := ls.unit.Duration() * time.Duration(ls.mult)
	if ls.mult > 0 && window/time.Duration(ls.mult) != ls.unit.Duration() {
		return nil, errors.New("unit_multiplier makes the window overflow")
	}
	if ls.algorithm == limiter.Concurrency {
		window = ls.leaseTTL
	}
	spec := limiter.PolicySpec{
		ID:          id,
		Revision:    ls.revision,
		Algorithm:   ls.algorithm,
		FailureMode: ls.failure,
		Shadow:      shadow,
		Penalty:     ls.penalty,
		Charge:      ls.charge,
		Reserve:     ls.reserve,
	}
	spec.Params = ls.algorithm.ParamsFor(limiter.Rate{Limit: int64(ls.rpu), Window: window, Burst: int64(ls.burst), Calendar: ls.calendar})
	return limiter.NewPolicy(spec)
}

// burstAlgorithms names the algorithms that take a burst.
func burstAlgorithms() string {
	var names []string
	for _, a := range limiter.Algorithms() {
		if a.TakesBurst() {
			names = append(names, a.String())
		}
	}
	return strings.Join(names, " or ")
}

// checkCharge reads a limit's charge: its own, else the compiler's default
// (Options.DefaultCharge), which a limit with a penalty box does not take
// (a penalty punishes requests; a charge is usage already spent), nor a
// concurrency limit (a lease is held, not spent; it refuses charge).
func (c *compiler) checkCharge(rl *rawLimit, ls *limitSpec, bad func(pos, string, ...any)) {
	if ls.algorithm == limiter.Concurrency {
		if rl.chargePos.set() {
			bad(rl.chargePos, "charge is not allowed with concurrency (a lease is held while the request runs, then returned)")
		}
		return
	}
	if !rl.chargePos.set() {
		if ls.penalty.On() {
			return
		}
		ls.charge = c.defaultCharge
		return
	}
	ch, err := limiter.ParseCharge(rl.charge)
	if err != nil || rl.charge == "" {
		bad(rl.chargePos, "charge %q is not one of allowed, always", truncate(rl.charge, 40))
		return
	}
	ls.charge = ch
}
