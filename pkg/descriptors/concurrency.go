package descriptors

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// checkConcurrency reads a concurrency limit (`concurrency: N` and
// `lease_ttl`) into ls: algorithm limiter.Concurrency, limit N. The
// window keys and the rate algorithms' extensions have no meaning for it
// and are refused; failure_mode, revision, headers, name and replaces
// apply as to any limit.
func (c *compiler) checkConcurrency(rl *rawLimit, ls *limitSpec, bad func(p pos, format string, args ...any)) {
	ls.algorithm, ls.rpu = limiter.Concurrency, rl.concurrency
	if !rl.concurrencyPos.set() {
		bad(rl.leaseTTLPos, "lease_ttl needs concurrency: N (the leases that may be held at once)")
	}
	for _, f := range []struct {
		p    pos
		name string
	}{{rl.unitPos, "unit"}, {rl.rpuPos, "requests_per_unit"}, {rl.unitMultiplierPos, "unit_multiplier"},
		{rl.algorithmPos, "algorithm"}, {rl.burstPos, "burst"}, {rl.calendarPos, "calendar"},
		{rl.timeZonePos, "time_zone"}, {rl.penaltyPos, "penalty"}} {
		if f.p.set() {
			bad(f.p, "%s is not allowed with concurrency (a concurrency limit counts requests in flight, not per unit of time)", f.name)
		}
	}
	if !rl.leaseTTLPos.set() {
		if rl.concurrencyPos.set() {
			bad(rl.concurrencyPos, "concurrency needs a lease_ttl (e.g. lease_ttl: 10m): how long a lease is held when no release comes")
		}
		return
	}
	d, err := time.ParseDuration(rl.leaseTTL)
	switch {
	case err != nil:
		bad(rl.leaseTTLPos, "lease_ttl %q is not a duration (e.g. 10m, 1h30m, 500ms)", truncate(rl.leaseTTL, 40))
	case d%time.Millisecond != 0 || d < time.Millisecond || d > limiter.MaxLeaseTTL:
		bad(rl.leaseTTLPos, "lease_ttl %s must be whole milliseconds between 1ms and %s", d, limiter.MaxLeaseTTL)
	default:
		ls.leaseTTL = d
	}
}
