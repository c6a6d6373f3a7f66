package limiter

import (
	"fmt"
	"strings"
	"time"
)

// Algorithm names one limit algorithm.
type Algorithm uint8

const (
	FixedWindow   Algorithm = iota + 1 // epoch-aligned windows with a counter
	SlidingWindow                      // sliding-window counter (two windows, weighted)
	TokenBucket                        // scaled tokens refilled continuously
	GCRA                               // generic cell rate algorithm: one theoretical arrival time
	SlidingLog                         // exact count over the trailing window: a log of hits
	Concurrency                        // requests in flight: leases taken and released (Lease)
)

// algorithms is the one dispatch point from an Algorithm to its rules: each
// entry is defined in the algorithm's own file. The value of the constant is
// also the algorithm byte the Lua batch program receives.
var algorithms = [...]*algorithmRules{
	FixedWindow:   &fixedWindowRules,
	SlidingWindow: &slidingWindowRules,
	TokenBucket:   &tokenBucketRules,
	GCRA:          &gcraRules,
	SlidingLog:    &slidingLogRules,
	Concurrency:   &concurrencyRules,
}

// algorithmRules is everything specific to one algorithm that is not its
// Params type's own methods.
type algorithmRules struct {
	// name is the configuration name (Algorithm.String).
	name string
	// step evaluates one request (docs/algorithms.md): state, effective
	// now, policy, cost.
	step func(st State, now int64, p *Policy, cost int64) step
	// certainty of its decisions.
	certainty Certainty
	// denialsHold: a denial stays true until its retry time whatever other
	// requests do (they only consume), so a cache may repeat it until then.
	denialsHold bool
	// burst: its parameters take Rate.Burst.
	burst bool
	// params builds its parameters from a rate as a rule file states it.
	params func(Rate) Params
	// sketch is how a conservative estimate of its state is kept
	// (Policy.SketchWindows, Policy.Deficit).
	sketch sketchRules
	// lease: a concurrency limit, evaluated by Lease (step is nil); not
	// one of Algorithms, the rate algorithms a rule's `algorithm` names.
	lease bool
	// charge records cost on st at now whatever it exceeds (a ChargeAlways
	// policy's denied request), up to Policy.Ceiling: the state fields
	// and ttl of the step it returns, ok false when nothing fits. nil:
	// chargeToCeiling.
	charge func(st State, now int64, p *Policy, cost int64) (s step, ok bool)
	// debtCheck, when set, checks that the algorithm's arithmetic stays
	// exact with usage up to ceiling (Policy.Ceiling).
	debtCheck func(p *Policy, ceiling int64) error
}

// sketchRules is how an estimator that may only over-count (the memory
// store's overflow sketch) holds one subject's state of an algorithm: as
// window counts, or as a deficit that refills.
type sketchRules struct {
	// windows: a window algorithm's counts (State.Level the window
	// State.Epoch's, State.Carry the previous window's) matter for this many
	// epoch-aligned windows of Policy.WindowMillis: 1 (fixed), 2 (sliding).
	// 0 for a deficit algorithm.
	windows int64
	// deficit: how far st at now is below a full allowance, in units of
	// which Refill's period make one unit of cost and amount refill per ms;
	// 0 when full, at most Ceiling * period (a debt included). Deficit
	// algorithms only.
	deficit func(st State, now int64, p *Policy) int64
	// state: the state fields whose deficit at now is d (deficit's inverse).
	state func(d, now int64, p *Policy) (epoch, level, carry int64)
}

// SketchWindows returns, for a window algorithm, how many epoch-aligned
// windows its counts matter for (1 fixed window, 2 sliding window): an
// estimate keeps, per subject, at least State.Level (and State.Carry, the
// previous window's) of the window State.Epoch. It returns 0 for an
// algorithm whose state is a deficit (Deficit).
func (p *Policy) SketchWindows() int64 { return p.rules.sketch.windows }

// Deficit returns, for an algorithm SketchWindows reports 0 of (token
// bucket, GCRA), how far st is below a full allowance at now: 0 when full,
// at most Ceiling() * period (Limit() * period but for a ChargeAlways debt), in units of which Refill's period make one unit
// of cost and amount refill per millisecond. A larger deficit only ever
// admits less, so an estimate that keeps at least each subject's deficit is
// conservative. 0 for a window algorithm.
func (p *Policy) Deficit(st State, now int64) int64 {
	if p.rules.sketch.deficit == nil {
		return 0
	}
	return p.rules.sketch.deficit(st, now, p)
}

// DeficitState is the state of p whose Deficit at now is d (0 <= d <=
// Ceiling() * period), last observed at now: the state a step taken at now
// decides with. No state for a window algorithm or a zero deficit.
func (p *Policy) DeficitState(d, now int64) State {
	if p.rules.sketch.state == nil || d <= 0 {
		return State{}
	}
	st := State{Exists: true, Schema: StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(), Revision: p.Revision(), LastObservedMs: now}
	st.Epoch, st.Level, st.Carry = p.rules.sketch.state(d, now, p)
	return st
}

func (a Algorithm) rules() *algorithmRules {
	if int(a) < len(algorithms) {
		return algorithms[a]
	}
	return nil
}

// Algorithms returns every rate algorithm, in the order of their
// constants: all but Concurrency, whose requests are leases (Lease).
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
	Calendar *Calendar
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

// CeilDiv is ceil(a / b) for a >= 0, b > 0, without the a+b-1 intermediate:
// the rounding of every wait and refill the algorithms compute.
func CeilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
