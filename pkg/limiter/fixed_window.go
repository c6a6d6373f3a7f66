package limiter

import "time"

// FixedWindowParams: at most Limit units per epoch-aligned Window.
type FixedWindowParams struct {
	Limit  int64
	Window time.Duration // whole milliseconds, >= 1ms
}

var fixedWindowRules = algorithmRules{
	name:        "fixed_window",
	step:        fixedWindow,
	certainty:   Certain,
	denialsHold: true,
	params: func(r Rate) Params {
		return FixedWindowParams{Limit: r.Limit, Window: r.Window}
	},
	sketch: sketchRules{windows: 1},
}

func (FixedWindowParams) algorithm() Algorithm { return FixedWindow }

func (prm FixedWindowParams) divided(n int64) Params {
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the window rule (applyWindow).
func (prm FixedWindowParams) apply(p *Policy) error {
	return applyWindow(p, prm.Limit, prm.Window)
}

// fixedWindow: State.Epoch is the window id, State.Level the units consumed
// in it.
func fixedWindow(st State, now int64, p *Policy, cost int64) step {
	limit, window := p.limit, p.windowMs
	w := now / window
	windowEnd := (w + 1) * window
	var consumed int64
	if st.Exists && st.Epoch == w {
		consumed = st.Level
	}
	s := step{allowed: cost <= limit-consumed, resetAt: windowEnd}
	if s.allowed {
		s.remainingBefore, s.resetAtBefore = limit-consumed, windowEnd
		consumed += cost
		s.epoch, s.level = w, consumed
		s.ttl = windowEnd - now + p.CleanupGraceMillis()
	} else {
		s.retryAfter = windowEnd - now
	}
	// max: a limit lowered under the same revision leaves consumed > limit.
	s.remaining = max(0, limit-consumed)
	return s
}
