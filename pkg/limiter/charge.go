package limiter

import "fmt"

// Charge says whether a limit records the cost of a request it denies.
type Charge uint8

const (
	// ChargeAllowed (the zero value): only an admitted request's cost is
	// recorded; a denial consumes nothing. Right for request rates.
	ChargeAllowed Charge = iota
	// ChargeAlways: the cost is recorded whatever the request's answer
	// (post-paid usage, such as the tokens of a response already sent),
	// up to DebtFactor times the limit in debt; later requests are denied
	// until the usage is back under the limit.
	ChargeAlways
)

// debtFactor bounds a ChargeAlways limit's debt: usage is recorded up to
// the limit plus DebtFactor times the limit (a token bucket or GCRA: that
// many tokens below empty), and a charge beyond that records only what
// fits. One limit's worth: a tenant is never locked out longer than one
// more full period (window, or refill of the whole capacity) than its
// allowance takes, a single oversized charge cannot block it for many
// periods, and every state number stays within twice the bounds NewPolicy
// already checks.
const debtFactor = 1

// String returns the configuration name: allowed, always.
func (c Charge) String() string {
	if c == ChargeAlways {
		return "always"
	}
	return "allowed"
}

// ParseCharge is the inverse of Charge.String; "" is ChargeAllowed.
func ParseCharge(s string) (Charge, error) {
	switch s {
	case "", "allowed":
		return ChargeAllowed, nil
	case "always":
		return ChargeAlways, nil
	}
	return 0, &FieldError{Field: "charge", Reason: fmt.Sprintf("%q is not one of allowed, always", s)}
}

// ChargeAlways reports whether the policy records the cost of the
// requests it denies (PolicySpec.Charge).
func (p *Policy) ChargeAlways() bool { return p.spec.Charge == ChargeAlways }

// Ceiling is the most usage the policy's state records: the limit, plus
// DebtFactor times it for a policy that records usage past its limit (a
// ChargeAlways policy, or a reserving one, whose settles charge what a
// request used beyond its reservation).
func (p *Policy) Ceiling() int64 {
	if p.ChargeAlways() || p.spec.Reserve.On() {
		return p.limit * (1 + debtFactor)
	}
	return p.limit
}

// Charges reports whether r records its cost whatever r and its batch
// decide: a request in a role that consumes of a ChargeAlways policy, or
// a settle of a reserving one (a reserve is taken only when its batch
// commits). Such a request is never demoted to a check and is never
// refunded.
func (r *Request) Charges() bool {
	if r.Policy == nil || !r.EffectiveRole().Consumes() {
		return false
	}
	if r.Reserves() {
		return r.Settles()
	}
	return r.Policy.ChargeAlways()
}

// checkCharge is NewPolicy's rule for the charge mode: no penalty box (a
// charge is usage already spent, not a request to punish), and every
// amount doubled by the debt still within the algorithm's bounds.
func checkCharge(p *Policy, spec *PolicySpec) error {
	if spec.Charge > ChargeAlways {
		return &FieldError{Field: "charge", Reason: "must be allowed or always"}
	}
	if spec.Charge != ChargeAlways && !spec.Reserve.On() {
		return nil
	}
	if spec.Penalty.On() && spec.Charge == ChargeAlways {
		return &FieldError{Field: "charge", Reason: "always cannot be combined with a penalty box"}
	}
	if p.limit > MaxSafeInteger/(1+debtFactor) {
		return &FieldError{Field: "charge", Reason: "always (or reserve) needs the limit at most half of 2^53-1"}
	}
	if p.rules.debtCheck != nil {
		if err := p.rules.debtCheck(p, p.Ceiling()); err != nil {
			return err
		}
	}
	return nil
}

// ceilingAtMost is the debt check of an algorithm (named by what in its
// error) whose usage must stay at most most: the limit of a ChargeAlways
// policy at most most/(1+DebtFactor).
func ceilingAtMost(most int64, what string) func(p *Policy, ceiling int64) error {
	return func(_ *Policy, ceiling int64) error {
		if ceiling > most {
			return &FieldError{Field: "limit", Reason: fmt.Sprintf("must be at most %d for %s with charge always", most/(1+debtFactor), what)}
		}
		return nil
	}
}
