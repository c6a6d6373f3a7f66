package limiter

import (
	"fmt"
	"time"
)

// SlidingWindowParams: at most Limit units in any Window, estimated from the
// current and previous epoch-aligned windows.
type SlidingWindowParams struct {
	Limit  int64
	Window time.Duration // whole milliseconds, >= 1ms
}

// SlidingScale is the fixed-point scale of the sliding-window weight.
const SlidingScale int64 = 1_000_000

var slidingWindowRules = algorithmRules{
	name:      "sliding_window",
	step:      slidingWindow,
	certainty: Approximate,
	params: func(r Rate) Params {
		return SlidingWindowParams{Limit: r.Limit, Window: r.Window}
	},
	sketch: sketchRules{windows: 2},
	// The weighted estimate multiplies counts up to the ceiling by
	// SlidingScale.
	debtCheck: ceilingAtMost(MaxSafeInteger/SlidingScale, "a sliding window"),
}

func (SlidingWindowParams) algorithm() Algorithm { return SlidingWindow }

func (prm SlidingWindowParams) divided(n int64) Params {
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the window rule (applyWindow), and the weighted estimate
// multiplies counts and window offsets by SlidingScale: both products must
// stay exact.
func (prm SlidingWindowParams) apply(p *Policy) error {
	if err := applyWindow(p, prm.Limit, prm.Window); err != nil {
		return err
	}
	if p.limit > MaxSafeInteger/SlidingScale {
		return &FieldError{Field: "limit", Reason: fmt.Sprintf("must be at most %d for a sliding window", MaxSafeInteger/SlidingScale)}
	}
	if p.windowMs > MaxSafeInteger/SlidingScale {
		return &FieldError{Field: "window", Reason: fmt.Sprintf("must be at most %dms for a sliding window", MaxSafeInteger/SlidingScale)}
	}
	return nil
}

// slidingWindow: State.Epoch is the window id, State.Level the current
// window's count, State.Carry the previous window's.
func slidingWindow(st State, now int64, p *Policy, cost int64) step {
	limit, window := p.limit, p.windowMs
	w, e := now/window, now%window
	cur, prev := slidingCounts(st, w)
	weight := CeilDiv((window-e)*SlidingScale, window)
	prevPart := CeilDiv(prev*weight, SlidingScale)
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
	wmax := k * SlidingScale / prev
	if wmax >= SlidingScale {
		return 0 // the full weight is admissible; also keeps wmax*window exact
	}
	return max(0, window-wmax*window/SlidingScale)
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
