package lua

import (
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// algorithmCodes are the algorithm bytes of the rate programs' arguments
// and states (rate-batch-v2.lua's header); concurrency has none (0). The
// codes of this file are the wire's, whatever values the Go constants have.
var algorithmCodes = [...]byte{limiter.FixedWindow: 1, limiter.SlidingWindow: 2, limiter.TokenBucket: 3,
	limiter.GCRA: 4, limiter.SlidingLog: 5, limiter.Concurrency: 0}

// roleCodes are the roles of the flags byte (FlagRoleMask).
var roleCodes = [...]byte{limiter.RoleOrdinary: 0, limiter.RoleShadow: 1, limiter.RoleQuota: 2,
	limiter.RoleCheck: 3, limiter.RoleProbe: 4, limiter.RoleQuotaProbe: 5}

// leaseOpCodes are lease-v2.lua's operations (its ARGV[1]).
var leaseOpCodes = [...]string{limiter.LeaseTake: "0", limiter.LeaseRelease: "1", limiter.LeaseReturn: "2"}

// statusCodes are the programs' status codes, by status; statusOf is the
// inverse (0: no status).
var statusCodes = [...]int64{algorithm.StatusAllowed: 1, algorithm.StatusDenied: 2, algorithm.StatusClockUnsafe: 3,
	algorithm.StatusStateIncompatible: 4, algorithm.StatusInvalid: 5, algorithm.StatusBlocked: 6}

func statusOf(code int64) algorithm.Status {
	for s, c := range statusCodes {
		if c == code && c != 0 {
			return algorithm.Status(s)
		}
	}
	return 0
}

// algorithmArgs are the two numbers that, with the limit, are p's
// arithmetic as the rate programs take them: the window in ms and 0 (the
// window algorithms), the refill amount and period in ms reduced to
// lowest terms (token bucket, GCRA: the emission interval is period/amount
// ms).
func algorithmArgs(p *limiter.Policy) (first, second int64) {
	if amount, period := p.Refill(); amount != 0 {
		return amount, period
	}
	return p.WindowMillis(), 0
}
