// Package algorithm holds the pure steps of the limit algorithms: a
// Request's cost against a stored State at one store time, for a
// limiter.Policy (Check), and a lease operation on a lease set (Lease),
// with the penalty box, the post-paid charge and the state layout they
// share. The memory store runs them; the Lua programs of pkg/lua mirror
// them, and the differential tests hold the two equal. Nothing here reads
// a clock or keeps state.
package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// rules is the step of one rate algorithm and what goes with it.
type rules struct {
	// step evaluates one request (docs/algorithms.md) on a state at the
	// effective now, against limit (the policy's, or its Ceiling for a
	// charge).
	step func(st State, now int64, p *limiter.Policy, limit, cost int64) step
	// charge records cost whatever it exceeds (a ChargeAlways policy's
	// denied request), up to Policy.Ceiling: the step's state fields and
	// ttl, ok false when nothing fits. nil: chargeToCeiling.
	charge func(st State, now int64, p *limiter.Policy, cost int64) (s step, ok bool)
	// refund gives back, at now, cost units a request took at the
	// effective time at, while st still holds them (the rules of the
	// refund sections of pkg/lua's fragments): st itself otherwise. nil:
	// the algorithm takes no reservations (limiter.Reserve).
	refund func(st State, now int64, p *limiter.Policy, cost, at int64) State
	sketch sketchRules
}

// sketchRules is how an estimate that may only over-count (the memory
// store's overflow sketch) keeps a state: as counts of windows
// (SketchWindows), or as a deficit and the state of a deficit (Deficit,
// DeficitState).
type sketchRules struct {
	windows int64
	deficit func(st State, now int64, p *limiter.Policy) int64
	state   func(d, now int64, p *limiter.Policy) (epoch, level, carry int64)
}

// algorithms is the one dispatch point from a rate algorithm to its step:
// each entry is defined in the algorithm's own file. Concurrency has none:
// its requests are leases (Lease).
var algorithms = [...]*rules{
	limiter.FixedWindow:   &fixedWindowRules,
	limiter.SlidingWindow: &slidingWindowRules,
	limiter.TokenBucket:   &tokenBucketRules,
	limiter.GCRA:          &gcraRules,
	limiter.SlidingLog:    &slidingLogRules,
}

// rulesOf returns the rules of p's algorithm, nil for Concurrency.
func rulesOf(p *limiter.Policy) *rules {
	if a := int(p.Algorithm()); a < len(algorithms) {
		return algorithms[a]
	}
	return nil
}

// SketchWindows returns, for a window algorithm, how many epoch-aligned
// windows its counts matter for (1 fixed window, 2 sliding window and
// sliding log): an estimate keeps, per subject, at least State.Level (and
// State.Carry, the previous window's) of the window State.Epoch. It
// returns 0 for an algorithm whose state is a deficit (Deficit).
func SketchWindows(p *limiter.Policy) int64 {
	if r := rulesOf(p); r != nil {
		return r.sketch.windows
	}
	return 0
}

// Deficit returns, for an algorithm SketchWindows reports 0 of (token
// bucket, GCRA), how far st is below a full allowance at now: 0 when full,
// at most Ceiling() * period (Limit() * period but for a ChargeAlways
// debt), in units of which Refill's period make one unit of cost and
// amount refill per millisecond. A larger deficit only ever admits less,
// so an estimate that keeps at least each subject's deficit is
// conservative. 0 for a window algorithm.
func Deficit(p *limiter.Policy, st State, now int64) int64 {
	if r := rulesOf(p); r != nil && r.sketch.deficit != nil {
		return r.sketch.deficit(st, now, p)
	}
	return 0
}

// DeficitState is the state of p whose Deficit at now is d (0 <= d <=
// Ceiling() * period), last observed at now: the state a step taken at now
// decides with. No state for a window algorithm or a zero deficit.
func DeficitState(p *limiter.Policy, d, now int64) State {
	r := rulesOf(p)
	if r == nil || r.sketch.state == nil || d <= 0 {
		return State{}
	}
	st := State{Exists: true, Schema: StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(), Revision: p.Revision(), LastObservedMs: now}
	st.Epoch, st.Level, st.Carry = r.sketch.state(d, now, p)
	return st
}

// WindowAt returns the id and the end (Unix ms) of the window of p holding
// nowMs, for the window algorithms: for an epoch-aligned window its index
// nowMs / WindowMillis and its end; for a calendar window its period's
// start and end (calendar.Calendar.Period).
func WindowAt(p *limiter.Policy, nowMs int64) (id, end int64) {
	if c := p.Calendar(); c != nil {
		return c.Period(nowMs)
	}
	w := p.WindowMillis()
	id = nowMs / w
	return id, (id + 1) * w
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
