package limiter

import (
	"fmt"
	"time"
)

// ConcurrencyParams: at most Limit leases held at once, each returned by a
// release or, at the latest, LeaseTTL after it was taken (so that a proxy
// that dies never keeps capacity). A request takes Cost leases.
type ConcurrencyParams struct {
	Limit    int64         // 0..MaxConcurrency
	LeaseTTL time.Duration // whole milliseconds, 1ms..MaxLeaseTTL
}

// MaxConcurrency bounds a concurrency limit, and so a lease set: every
// operation reads and writes the whole set (at most one entry per distinct
// expiry millisecond).
const MaxConcurrency = 10_000

// MaxLeaseTTL bounds a lease's time to live.
const MaxLeaseTTL = 24 * time.Hour

// LeaseOp is what a request does to a concurrency limit's lease set.
type LeaseOp uint8

const (
	// LeaseTake (the zero value) takes Cost leases when fewer than
	// Limit-Cost+1 are held; a check or a probe (Role.Consumes false) only
	// asks whether it would.
	LeaseTake LeaseOp = iota
	// LeaseRelease returns Cost leases: those of Request.LeaseAt, the
	// expiry that identifies the leases of one take, or without it the
	// soonest-expiring ones (every lease lives LeaseTTL, so the oldest). A
	// release never takes the set below zero, is always allowed and never
	// blocks its batch.
	LeaseRelease
	// LeaseReturn gives back Cost leases that a take of the same batch
	// took, when the batch did not commit: those of Request.LeaseAt, or
	// without it the latest-expiring ones.
	LeaseReturn
)

func (o LeaseOp) String() string {
	switch o {
	case LeaseTake:
		return "take"
	case LeaseRelease:
		return "release"
	case LeaseReturn:
		return "return"
	}
	return "unknown"
}

var concurrencyRules = algorithmRules{
	name:      "concurrency",
	certainty: Certain,
	// A release frees capacity before any lease expires: a denial does not
	// hold until its retry time.
	denialsHold: false,
	lease:       true,
	params: func(r Rate) Params {
		return ConcurrencyParams{Limit: r.Limit, LeaseTTL: r.Window}
	},
}

func (ConcurrencyParams) algorithm() Algorithm { return Concurrency }

func (prm ConcurrencyParams) divided(n int64) Params {
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: limit in [0, MaxConcurrency], lease TTL in [1ms, MaxLeaseTTL];
// the policy's window is the lease TTL and its algorithm arguments are
// the TTL in ms and 0.
func (prm ConcurrencyParams) apply(p *Policy) error {
	if prm.Limit < 0 || prm.Limit > MaxConcurrency {
		return &FieldError{Field: "concurrency", Reason: fmt.Sprintf("must be between 0 and %d", MaxConcurrency)}
	}
	if prm.LeaseTTL%time.Millisecond != 0 || prm.LeaseTTL < time.Millisecond || prm.LeaseTTL > MaxLeaseTTL {
		return &FieldError{Field: "lease_ttl", Reason: fmt.Sprintf("must be whole milliseconds between 1ms and %s", MaxLeaseTTL)}
	}
	p.limit, p.windowMs = prm.Limit, prm.LeaseTTL.Milliseconds()
	return nil
}

// Leases reports whether the policy limits requests in flight with leases
// (Concurrency): its requests take and give back leases
// (pkg/limiter/algorithm's Lease).
func (p *Policy) Leases() bool { return p.rules.lease }

// LeasesOnly reports whether every request of batch is of a concurrency
// policy (Policy.Leases). A store evaluates such a batch request by
// request, in order, on its lease sets; pkg/limiter/leases sends the lease
// requests of a batch to it apart from the rate requests, and keeps the
// whole batch all or nothing.
func LeasesOnly(batch []Request) bool {
	for i := range batch {
		if p := batch[i].Policy; p == nil || !p.Leases() {
			return false
		}
	}
	return true
}

// LeaseTTLMillis returns a concurrency policy's lease TTL in ms (0 for a
// rate algorithm).
func (p *Policy) LeaseTTLMillis() int64 {
	if !p.rules.lease {
		return 0
	}
	return p.windowMs
}
