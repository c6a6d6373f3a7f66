package limiter

import "time"

// FixedWindowParams: at most Limit units per epoch-aligned Window, or, with
// a Calendar, per calendar period of a time zone.
type FixedWindowParams struct {
	Limit  int64
	Window time.Duration // whole milliseconds, >= 1ms
	// Calendar, when set, makes the windows calendar periods (Window is
	// then only the unit's nominal length, as Policy.WindowMillis reports
	// it). (Optional)
	Calendar *Calendar
}

var fixedWindowRules = algorithmRules{
	name:        "fixed_window",
	step:        fixedWindow,
	certainty:   Certain,
	denialsHold: true,
	params: func(r Rate) Params {
		return FixedWindowParams{Limit: r.Limit, Window: r.Window, Calendar: r.Calendar}
	},
	sketch: sketchRules{windows: 1},
}

func (FixedWindowParams) algorithm() Algorithm { return FixedWindow }

func (prm FixedWindowParams) divided(n int64) Params {
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the window rule (applyWindow), and a calendar's unit and zone.
func (prm FixedWindowParams) apply(p *Policy) error {
	if prm.Calendar != nil {
		if err := prm.Calendar.check(); err != nil {
			return err
		}
		p.calendar = prm.Calendar.clone()
	}
	return applyWindow(p, prm.Limit, prm.Window)
}

// fixedWindow: State.Epoch is the window id (a calendar period's start
// ms), State.Level the units consumed in it.
func fixedWindow(st State, now int64, p *Policy, cost int64) step {
	limit := p.limit
	w, windowEnd := p.WindowAt(now)
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
