package limitertest

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// charging is spec charging always (limiter.ChargeAlways).
func charging(spec limiter.PolicySpec) limiter.PolicySpec {
	spec.Charge = limiter.ChargeAlways
	return spec
}

// charged is a charge's decision: the cost recorded (Consumed), allowed or
// not.
func charged(allowed bool, rem int64) Want {
	return Want{Allowed: allowed, Consumed: true, Remaining: rem}
}

// chargeCases are the batch-rule cases of limits that charge always: a
// charge is recorded past the limit up to twice it, whatever its batch
// decides; it blocks the batch when it exceeds, so the ordinary limits of
// the batch commit only when every limit allows; a probe (hits_addend 0)
// is denied while the usage is at or above the limit and records nothing.
func chargeCases() []Case {
	o, pr, c := limiter.RoleOrdinary, limiter.RoleProbe, limiter.RoleCheck
	var cases []Case
	for _, spec := range []limiter.PolicySpec{fw("budget", 5), tb("budget", 5)} {
		name := spec.Algorithm.String()
		cases = append(cases, Case{
			Name:     "charge always records past the limit: " + name,
			Policies: []limiter.PolicySpec{charging(spec)},
			Steps: []Step{
				{Batch: []Req{{0, "t", 1, pr}}, Want: []Want{allowedHeld(5)}},
				{Batch: []Req{{0, "t", 3, o}}, Want: []Want{charged(true, 2)}},
				{Batch: []Req{{0, "t", 1, pr}}, Want: []Want{allowedHeld(2)}},
				{Batch: []Req{{0, "t", 3, o}}, Want: []Want{charged(false, 0)}},
				// 6 of 5 recorded: the probe and a check are denied.
				{Batch: []Req{{0, "t", 1, pr}}, Want: []Want{denied(0)}},
				{Batch: []Req{{0, "t", 1, c}}, Want: []Want{denied(0)}},
				{Batch: []Req{{0, "t", 1, o}}, Want: []Want{charged(false, 0)}},
				// Up to the ceiling of 10, then no further.
				{Batch: []Req{{0, "t", 10, o}}, Want: []Want{charged(false, 0)}},
				{Batch: []Req{{0, "t", 1, o}}, Want: []Want{charged(false, 0)}},
				{Batch: []Req{{0, "t", 2, o}, {0, "t", 1, pr}}, Want: []Want{charged(false, 0), denied(0)}},
			},
		}, Case{
			// A request mixing a charge and ordinary limits: the charge is
			// recorded whatever the request answers; the ordinary limit
			// consumes only when every limit allows.
			Name:     "charge beside an ordinary limit: " + name,
			Policies: []limiter.PolicySpec{charging(spec), fw("user", 1)},
			Steps: []Step{
				{Batch: []Req{{0, "t", 2, o}, {1, "bob", 1, o}}, Want: []Want{charged(true, 3), allowedConsumed(0)}},
				// The user denies: the charge is recorded all the same.
				{Batch: []Req{{0, "t", 2, o}, {1, "bob", 1, o}}, Want: []Want{charged(true, 1), denied(0)}},
				// The charge exceeds: recorded, and eve's limit is not spent.
				{Batch: []Req{{0, "t", 2, o}, {1, "eve", 1, o}}, Want: []Want{charged(false, 0), allowedHeld(1)}},
				{Batch: []Req{{1, "eve", 1, o}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{0, "t", 1, pr}}, Want: []Want{denied(0)}},
			},
		})
	}
	return cases
}
