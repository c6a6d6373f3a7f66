package limiter

import (
	"fmt"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// Algorithm names one limit algorithm.
type Algorithm uint8

const (
	FixedWindow   Algorithm = iota + 1 // epoch-aligned windows with a counter
	SlidingWindow                      // sliding-window counter (two windows, weighted)
	TokenBucket                        // scaled tokens refilled continuously
	GCRA                               // generic cell rate algorithm: one theoretical arrival time
	SlidingLog                         // exact count over the trailing window: a log of hits
	Concurrency                        // requests in flight: leases taken and released
)

// algorithms is the one dispatch point from an Algorithm to its rules: each
// entry is defined beside its Params type (params.go).
var algorithms = [...]*algorithmRules{
	FixedWindow:   &fixedWindowRules,
	SlidingWindow: &slidingWindowRules,
	TokenBucket:   &tokenBucketRules,
	GCRA:          &gcraRules,
	SlidingLog:    &slidingLogRules,
	Concurrency:   &concurrencyRules,
}

// algorithmRules is what a policy knows of its algorithm beyond its Params
// type's own methods; the steps are pkg/limiter/algorithm's.
type algorithmRules struct {
	// name is the configuration name (Algorithm.String).
	name string
	// certainty of its decisions.
	certainty Certainty
	// denialsHold: a denial stays true until its retry time whatever other
	// requests do (they only consume), so a cache may repeat it until then.
	denialsHold bool
	// burst: its parameters take Rate.Burst.
	burst bool
	// params builds its parameters from a rate as a rule file states it.
	params func(Rate) Params
	// lease: a concurrency limit, whose requests take and give back
	// leases; not one of Algorithms, the rate algorithms a rule's
	// `algorithm` names.
	lease bool
	// debtCheck, when set, checks that the algorithm's arithmetic stays
	// exact with usage up to ceiling (Policy.Ceiling).
	debtCheck func(p *Policy, ceiling int64) error
}

func (a Algorithm) rules() *algorithmRules {
	if int(a) < len(algorithms) {
		return algorithms[a]
	}
	return nil
}

// Algorithms returns every rate algorithm, in the order of their
// constants: all but Concurrency, whose requests are leases.
func Algorithms() []Algorithm {
	var out []Algorithm
	for a, r := range algorithms {
		if r != nil && !r.lease {
			out = append(out, Algorithm(a))
		}
	}
	return out
}

// AlgorithmNames is the configuration names of Algorithms, comma-separated.
func AlgorithmNames() string {
	var names []string
	for _, a := range Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// String returns the configuration name: fixed_window, sliding_window,
// token_bucket, gcra, sliding_log.
func (a Algorithm) String() string {
	if r := a.rules(); r != nil {
		return r.name
	}
	return "unknown"
}

// ParseAlgorithm is the inverse of Algorithm.String.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, &FieldError{Field: "algorithm", Reason: fmt.Sprintf("%q is not one of %s", s, AlgorithmNames())}
}

// TakesBurst reports whether the algorithm's parameters use Rate.Burst.
func (a Algorithm) TakesBurst() bool {
	r := a.rules()
	return r != nil && r.burst
}

// Rate is a limit as a rule file states it: Limit units per Window, and
// Burst units at once when the algorithm takes a burst (0: Limit).
type Rate struct {
	Limit  int64
	Window time.Duration
	Burst  int64
	// Calendar makes a fixed window a calendar period (nil: epoch-aligned
	// windows); the other algorithms ignore it.
	Calendar *calendar.Calendar
}

// ParamsFor returns the algorithm's parameters for r, to be validated by
// NewPolicy; nil for an unknown algorithm.
func (a Algorithm) ParamsFor(r Rate) Params {
	if rl := a.rules(); rl != nil {
		return rl.params(r)
	}
	return nil
}

// Params holds the parameters of exactly one algorithm: one of
// FixedWindowParams, SlidingWindowParams, TokenBucketParams, GCRAParams or
// SlidingLogParams.
type Params interface {
	algorithm() Algorithm
	// apply checks the parameters (a *FieldError naming the first
	// offending field) and sets p's limit and algorithm arguments.
	apply(p *Policy) error
	// divided is the parameters with every amount (limit, capacity,
	// refill) divided by n through share (Policy.Share).
	divided(n int64) Params
}

// share is v divided by n, rounded down, at least 1; a zero v stays 0.
func share(v, n int64) int64 {
	if v == 0 {
		return 0
	}
	return max(v/n, 1)
}

// Share is the policy one of n replicas applies alone: every amount of p
// divided by n (rounded down, at least 1; a zero limit stays 0), the max
// cost capped by the divided limit, failing closed.
func (p *Policy) Share(n int64) (*Policy, error) {
	if n < 1 {
		return nil, fmt.Errorf("limiter: share of %d replicas", n)
	}
	spec := p.Spec()
	spec.FailureMode = FailClosed
	spec.Params = spec.Params.divided(n)
	q, err := NewPolicy(PolicySpec{ID: spec.ID, Algorithm: spec.Algorithm, Params: spec.Params, Charge: spec.Charge})
	if err != nil {
		return nil, err
	}
	spec.MaxCost = min(spec.MaxCost, q.Ceiling())
	return NewPolicy(spec)
}
