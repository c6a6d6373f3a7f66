package limiter

import (
	"fmt"
	"time"
)

// Reserve makes a rate limit a budget that requests reserve when they
// start and settle when they end (PolicySpec.Reserve): a request of the
// policy with Lease LeaseTake reserves its cost (the estimate) as an
// ordinary request consumes it, admitted only if the budget, the live
// reservations counted, covers it, and holds a reservation of that cost
// whose identity is its expiry (Decision.HoldAt). A LeaseRelease naming
// that identity (LeaseAt) settles it: the reservation is removed and the
// difference between the request's cost (the actual usage, 0 allowed) and
// the estimate is charged (recorded even past the limit, as ChargeAlways)
// or given back (only while the state still holds what the reservation
// took: the algorithm's refund rule). A release naming no live reservation
// (expired, settled already, or never held) changes nothing; a release
// with LeaseAt 0 is a plain charge of its cost. A reservation never
// settled expires after TTL and stays charged at its estimate: the
// request was admitted and may have used it, and a budget must not grow
// back because a proxy never reported.
//
// The bound: what a budget admits over a window is at most its limit plus,
// over the settled reservations, the sum of max(0, actual - estimate).
type Reserve struct {
	// TTL is how long an unsettled reservation is held, 1ms..MaxLeaseTTL.
	// (Required when Reserve is set)
	TTL time.Duration
	// Estimate, when not 0, is the cost every reservation holds, whatever
	// the request's own cost. 0 reserves the request's cost (Envoy's
	// hits_addend, e.g. a request's max_tokens). (Optional, at most the
	// limit and the policy's MaxCost)
	Estimate int64
}

// MaxReservations bounds the live reservations one subject of one policy
// holds: a reserve beyond it is denied until the soonest one expires or is
// settled.
const MaxReservations = 64

// On reports whether r is set.
func (r Reserve) On() bool { return r.TTL != 0 }

// checkReserve validates spec.Reserve against the policy p is becoming:
// a rate algorithm whose state can hold reservations and refund (every
// rate algorithm but the sliding log), no penalty box (a reservation is
// not an offence), the TTL within MaxLeaseTTL and the estimate within the
// policy's max cost.
func checkReserve(p *Policy, spec *PolicySpec) error {
	r := spec.Reserve
	if !r.On() {
		if r.Estimate != 0 {
			return &FieldError{Field: "reserve", Reason: "estimate needs a ttl"}
		}
		return nil
	}
	switch {
	case p.rules.lease:
		return &FieldError{Field: "reserve", Reason: "is for rate limits; a concurrency limit holds leases of its own"}
	case spec.Algorithm == SlidingLog:
		return &FieldError{Field: "reserve", Reason: "is not supported with sliding_log (its log keeps one entry per hit); use sliding_window"}
	case spec.Penalty.On():
		return &FieldError{Field: "reserve", Reason: "cannot be combined with a penalty box"}
	case r.TTL%time.Millisecond != 0 || r.TTL < time.Millisecond || r.TTL > MaxLeaseTTL:
		return &FieldError{Field: "reserve", Reason: fmt.Sprintf("ttl must be whole milliseconds between 1ms and %s", MaxLeaseTTL)}
	case r.Estimate < 0 || r.Estimate > min(spec.MaxCost, p.limit):
		return &FieldError{Field: "reserve", Reason: fmt.Sprintf("estimate must be between 0 (the request's own cost) and %d (the limit, or the max cost when lower): a larger reservation is never admitted", min(spec.MaxCost, p.limit))}
	}
	return nil
}

// Reserve returns the policy's reservations (PolicySpec.Reserve); its On
// is false for a policy without them.
func (p *Policy) Reserve() Reserve { return p.spec.Reserve }

// Reserves reports whether r reserves or settles on a reserving policy.
// Such a request is a rate request: it goes in its batch with the other
// limits, atomic with them.
func (r *Request) Reserves() bool { return r.Policy != nil && r.Policy.spec.Reserve.On() }

// Settles reports whether r settles a reservation (or, with LeaseAt 0,
// charges without one): a release on a reserving policy. Its batch's rule
// counts it as a check (a stream's end must not be denied: Commits), and
// it is recorded whatever its batch decides (Charges).
func (r *Request) Settles() bool { return r.Lease == LeaseRelease && r.Reserves() }
