package limiter

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
	// 0 when full, at most Limit * period. Deficit algorithms only.
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
// at most Limit() * period, in units of which Refill's period make one unit
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
// Limit() * period), last observed at now: the state a step taken at now
// decides with. No state for a window algorithm or a zero deficit.
func (p *Policy) DeficitState(d, now int64) State {
	if p.rules.sketch.state == nil || d <= 0 {
		return State{}
	}
	st := State{Exists: true, Schema: StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(), Revision: p.Revision(), LastObservedMs: now}
	st.Epoch, st.Level, st.Carry = p.rules.sketch.state(d, now, p)
	return st
}
