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
}

func (FixedWindowParams) algorithm() Algorithm { return FixedWindow }

// apply: limit in [0, 2^53-1], window in [1ms, ten years]. The algorithm
// arguments are the window in ms and 0.
func (prm FixedWindowParams) apply(p *Policy) error {
	if err := limitField("limit", prm.Limit); err != nil {
		return err
	}
	if err := durationField("window", prm.Window, 1); err != nil {
		return err
	}
	p.limit, p.windowMs = prm.Limit, prm.Window.Milliseconds()
	p.args = [2]int64{p.windowMs, 0}
	return nil
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
