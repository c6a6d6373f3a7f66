package limiter

import (
	"fmt"
	"regexp"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// Defaults for PolicySpec fields left zero.
const (
	DefaultRevision           uint32 = 1
	defaultCleanupGrace              = 1 * time.Second
	defaultMaxClockRegression        = 2 * time.Second
	// MaxPolicyIDLength bounds a policy ID.
	MaxPolicyIDLength = 128
	// MaxDurationMillis bounds windows, refill periods, grace and
	// regression: ten years in milliseconds.
	MaxDurationMillis int64 = 10 * 366 * 24 * 3600 * 1000
)

var policyIDPattern = regexp.MustCompile(`^[a-z0-9._:/-]{1,128}$`)

// PolicySpec is the input to NewPolicy.
type PolicySpec struct {
	// ID is stable across limit changes, [a-z0-9._:/-]{1,128}. (Required)
	ID string
	// Revision rolls state: a new revision starts fresh. (Optional, default 1)
	Revision uint32
	// Algorithm must match the type of Params. (Required)
	Algorithm Algorithm
	// Params holds exactly one algorithm's parameters. (Required)
	Params Params
	// MaxCost bounds Request.Cost. (Optional, default and at most: the
	// limit or capacity, Policy.Ceiling for ChargeAlways; 0 is kept only
	// for a zero limit, which denies every request.)
	MaxCost int64
	// CleanupGrace is added to every state TTL. (Optional, default 1s)
	CleanupGrace time.Duration
	// MaxClockRegression: a store clock this far behind the stored
	// last-observed time is clamped; further behind answers CLOCK_UNSAFE.
	// (Optional, default 2s; must be >= 0)
	MaxClockRegression time.Duration
	// FailureMode is what a store failure answers. (Optional, default closed)
	FailureMode FailureMode
	// Shadow: evaluated and counted, but never denies. (Optional)
	Shadow bool
	// Penalty is the limit's penalty box. (Optional, default none)
	Penalty Penalty
	// Charge: whether a denied request's cost is recorded (ChargeAlways:
	// post-paid usage, bounded by DebtFactor). (Optional, default
	// ChargeAllowed)
	Charge Charge
	// Group, when set, makes the policy one of a class of policies made at
	// request time (a request-supplied limit override) rather than
	// configured: the class shares one bounded part of a store (see
	// pkg/limiter/memory) and is reported under this one name instead of
	// the policy ID, which derives from request data. Same pattern as ID.
	// (Optional, default none: a configured policy, reported by its ID)
	Group string
	// Reserve makes the limit a budget requests reserve and settle (see
	// Reserve). (Optional, default none)
	Reserve Reserve
}

// Policy is a validated, immutable PolicySpec. Build it with NewPolicy. The
// zero value is not usable.
type Policy struct {
	spec PolicySpec
	// limit is the limit or capacity; windowMs the window or refill period.
	limit    int64
	windowMs int64
	// refillAmount and refillPeriodMs are the token bucket (or GCRA) rate
	// reduced by their greatest common divisor, so that its arithmetic
	// stays small.
	refillAmount   int64
	refillPeriodMs int64
	// calendar makes a fixed window's windows calendar periods.
	calendar *calendar.Calendar
	rules    *algorithmRules
}

// NewPolicy validates spec and fills its defaults. The error is a *FieldError
// naming the first offending field.
func NewPolicy(spec PolicySpec) (*Policy, error) {
	if spec.ID == "" {
		return nil, &FieldError{Field: "id", Reason: "is empty"}
	}
	if len(spec.ID) > MaxPolicyIDLength {
		return nil, &FieldError{Field: "id", Reason: fmt.Sprintf("is longer than %d bytes", MaxPolicyIDLength)}
	}
	if !policyIDPattern.MatchString(spec.ID) {
		return nil, &FieldError{Field: "id", Reason: "may only contain [a-z0-9._:/-]"}
	}
	if spec.Group != "" && !policyIDPattern.MatchString(spec.Group) {
		return nil, &FieldError{Field: "group", Reason: "may only contain [a-z0-9._:/-], at most 128 bytes"}
	}
	if spec.Revision == 0 {
		spec.Revision = DefaultRevision
	}
	if spec.Params == nil {
		return nil, &FieldError{Field: "params", Reason: "is required"}
	}
	if spec.Algorithm != spec.Params.algorithm() {
		return nil, &FieldError{Field: "params", Reason: fmt.Sprintf("are %s parameters but algorithm is %s", spec.Params.algorithm(), spec.Algorithm)}
	}
	if spec.CleanupGrace == 0 {
		spec.CleanupGrace = defaultCleanupGrace
	}
	if spec.MaxClockRegression == 0 {
		spec.MaxClockRegression = defaultMaxClockRegression
	}
	if err := durationField("cleanup_grace", spec.CleanupGrace, 0); err != nil {
		return nil, err
	}
	if err := durationField("max_clock_regression", spec.MaxClockRegression, 0); err != nil {
		return nil, err
	}
	if spec.FailureMode > FailLocal {
		return nil, &FieldError{Field: "failure_mode", Reason: "must be closed, open or local"}
	}
	p := &Policy{rules: spec.Algorithm.rules()}
	if p.rules == nil { // a Params type without an entry in algorithms

		return nil, &FieldError{Field: "algorithm", Reason: fmt.Sprintf("%d is not a known algorithm", spec.Algorithm)}
	}
	if err := spec.Params.apply(p); err != nil {
		return nil, err
	}
	pn, err := spec.Penalty.validate(p.limit)
	if err != nil {
		return nil, err
	}
	spec.Penalty = pn
	p.spec.Charge, p.spec.Reserve = spec.Charge, spec.Reserve
	if err := checkCharge(p, &spec); err != nil {
		return nil, err
	}
	switch ceiling := p.Ceiling(); {
	case spec.MaxCost == 0:
		spec.MaxCost = ceiling
	case spec.MaxCost < 0:
		return nil, &FieldError{Field: "max_cost", Reason: "must not be negative"}
	case spec.MaxCost > ceiling:
		return nil, &FieldError{Field: "max_cost", Reason: fmt.Sprintf("%d is above the limit %d", spec.MaxCost, ceiling)}
	}
	if err := checkReserve(p, &spec); err != nil {
		return nil, err
	}
	p.spec = spec
	return p, nil
}

// applyWindow is the rule of a window algorithm's parameters: limit in
// [0, 2^53-1], window in [1ms, ten years]; they set the policy's limit and
// window, and its algorithm arguments are the window in ms and 0.
func applyWindow(p *Policy, limit int64, window time.Duration) error {
	if err := limitField("limit", limit); err != nil {
		return err
	}
	if err := durationField("window", window, 1); err != nil {
		return err
	}
	p.limit, p.windowMs = limit, window.Milliseconds()
	return nil
}

func limitField(name string, v int64) error {
	if v < 0 || v > MaxSafeInteger {
		return &FieldError{Field: name, Reason: fmt.Sprintf("must be between 0 and %d", MaxSafeInteger)}
	}
	return nil
}

func durationField(name string, d time.Duration, minMillis int64) error {
	if d%time.Millisecond != 0 {
		return &FieldError{Field: name, Reason: "must be whole milliseconds"}
	}
	ms := d.Milliseconds()
	if ms < minMillis || ms > MaxDurationMillis {
		return &FieldError{Field: name, Reason: fmt.Sprintf("must be between %dms and %dms", minMillis, MaxDurationMillis)}
	}
	return nil
}

// ID returns the policy ID.
func (p *Policy) ID() string { return p.spec.ID }

// Group returns the class of request-made policies the policy belongs to,
// or "" for a configured policy (PolicySpec.Group).
func (p *Policy) Group() string { return p.spec.Group }

// Label names the policy where the number of names must stay bounded
// (metric labels): its Group when it has one, else its ID.
func (p *Policy) Label() string {
	if p.spec.Group != "" {
		return p.spec.Group
	}
	return p.spec.ID
}

// Revision returns the policy revision (>= 1).
func (p *Policy) Revision() uint32 { return p.spec.Revision }

// Algorithm returns the policy's algorithm.
func (p *Policy) Algorithm() Algorithm { return p.spec.Algorithm }

// Params returns the algorithm parameters as given.
func (p *Policy) Params() Params { return p.spec.Params }

// Limit returns the limit (fixed and sliding window, sliding log), capacity (token
// bucket) or burst (GCRA).
func (p *Policy) Limit() int64 { return p.limit }

// WindowMillis returns the window (fixed and sliding), the refill period
// (token bucket) or the period (GCRA) in milliseconds.
func (p *Policy) WindowMillis() int64 { return p.windowMs }

// Refill returns the token bucket refill rate, or the GCRA rate, reduced to
// lowest terms: amount tokens (requests) every periodMs milliseconds; the
// GCRA emission interval is periodMs/amount ms. Zero for other algorithms.
func (p *Policy) Refill() (amount, periodMs int64) { return p.refillAmount, p.refillPeriodMs }

// MaxCost returns the largest cost a Request may carry.
func (p *Policy) MaxCost() int64 { return p.spec.MaxCost }

// CleanupGraceMillis returns the grace added to every state TTL.
func (p *Policy) CleanupGraceMillis() int64 { return p.spec.CleanupGrace.Milliseconds() }

// MaxClockRegressionMillis returns the largest backward clock step that is
// clamped rather than refused.
func (p *Policy) MaxClockRegressionMillis() int64 { return p.spec.MaxClockRegression.Milliseconds() }

// FailureMode returns what a store failure answers.
func (p *Policy) FailureMode() FailureMode { return p.spec.FailureMode }

// Shadow reports whether the policy is in shadow mode.
func (p *Policy) Shadow() bool { return p.spec.Shadow }

// Certainty returns Approximate for the sliding-window counter, else Certain.
func (p *Policy) Certainty() Certainty { return p.rules.certainty }

// DenialsHold reports whether a denial of this policy stays true until its
// retry time whatever other requests do (they can only consume more), so
// that a cache may repeat it until then: true for the fixed window, the
// token bucket, GCRA and the sliding log, false for the sliding-window
// estimate.
func (p *Policy) DenialsHold() bool { return p.rules.denialsHold }

// Calendar returns the calendar of a calendar fixed window, else nil.
func (p *Policy) Calendar() *calendar.Calendar { return p.calendar }

// Spec returns a copy of the validated spec, defaults filled.
func (p *Policy) Spec() PolicySpec { return p.spec }
