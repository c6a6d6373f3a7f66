package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

var fixedWindowRules = rules{step: fixedWindow, refund: fixedWindowRefund, sketch: sketchRules{windows: 1}}

// fixedWindow: State.Epoch is the window id (a calendar period's start
// ms), State.Level the units consumed in it.
func fixedWindow(st State, now int64, p *limiter.Policy, limit, cost int64) step {
	w, windowEnd := WindowAt(p, now)
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

// fixedWindowRefund gives back cost taken at at while the state counts the
// window (calendar period) holding at, never below 0.
func fixedWindowRefund(st State, _ int64, p *limiter.Policy, cost, at int64) State {
	if w, _ := WindowAt(p, at); st.Epoch == w {
		st.Level = max(0, st.Level-cost)
	}
	return st
}
