package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

var slidingWindowRules = rules{step: slidingWindow, refund: slidingWindowRefund, sketch: sketchRules{windows: 2}}

// slidingWindow: State.Epoch is the window id, State.Level the current
// window's count, State.Carry the previous window's.
func slidingWindow(st State, now int64, p *limiter.Policy, limit, cost int64) step {
	window := p.WindowMillis()
	w, e := now/window, now%window
	cur, prev := slidingCounts(st, w)
	weight := CeilDiv((window-e)*limiter.SlidingScale, window)
	prevPart := CeilDiv(prev*weight, limiter.SlidingScale)
	s := step{allowed: cost <= limit-(prevPart+cur)}
	if s.allowed {
		s.remainingBefore, s.resetAtBefore = limit-(prevPart+cur), slidingReset(now, w, window, prev, cur)
		cur += cost
		s.epoch, s.level, s.carry = w, cur, prev
		s.ttl = (w+2)*window - now + p.CleanupGraceMillis()
	} else {
		if limit-cur-cost >= 0 {
			s.retryAfter = slidingNeed(prev, cur, cost, limit, window) - e
		} else {
			s.retryAfter = (window - e) + slidingNeed(cur, 0, cost, limit, window)
		}
		s.retryAfter = max(1, s.retryAfter)
	}
	s.remaining = max(0, limit-(prevPart+cur))
	s.resetAt = slidingReset(now, w, window, prev, cur)
	return s
}

// slidingReset is when a sliding window's estimate returns to 0 without
// traffic.
func slidingReset(now, w, window, prev, cur int64) int64 {
	switch {
	case cur > 0:
		return (w + 2) * window
	case prev > 0:
		return (w + 1) * window
	}
	return now
}

// slidingNeed is need(p, c) of docs/algorithms.md: the least elapsed time e'
// in [0, window] of a window whose previous count is prev and current count
// cur at which ceil(prev*weight(e'), S) + cur + cost <= limit.
func slidingNeed(prev, cur, cost, limit, window int64) int64 {
	k := limit - cur - cost
	if k < 0 {
		return window // never admissible in this window
	}
	if prev == 0 {
		return 0
	}
	wmax := k * limiter.SlidingScale / prev
	if wmax >= limiter.SlidingScale {
		return 0 // the full weight is admissible; also keeps wmax*window exact
	}
	return max(0, window-wmax*window/limiter.SlidingScale)
}

// slidingCounts are the current and previous counts of st in window w.
func slidingCounts(st State, w int64) (cur, prev int64) {
	if st.Exists {
		switch st.Epoch {
		case w:
			return st.Level, st.Carry
		case w - 1:
			return 0, st.Level
		}
	}
	return 0, 0
}

// slidingWindowRefund gives back cost taken at at while the state counts
// the window holding at: as its current window (level) or, one window
// later, as the previous one (carry); never below 0.
func slidingWindowRefund(st State, _ int64, p *limiter.Policy, cost, at int64) State {
	switch w := at / p.WindowMillis(); st.Epoch {
	case w:
		st.Level = max(0, st.Level-cost)
	case w + 1:
		st.Carry = max(0, st.Carry-cost)
	}
	return st
}
