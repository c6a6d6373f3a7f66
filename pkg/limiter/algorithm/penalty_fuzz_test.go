package algorithm_test

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// FuzzPenalty drives Check on a fixed window with a penalty box through
// random (advance, cost) steps (the sim encoding), keeping the state as a
// store that records offences does, and checks the box's rules at every
// step: a request before the block's end is BLOCKED, changes nothing and
// is told to come back when both the block and the limit admit it; a
// denial is an offence whose level and block follow the doubling rule; an
// allowed request keeps the penalty fields; every block lies in
// [duration, max_duration].
func FuzzPenalty(f *testing.F) {
	fuzzSeeds(f, func(a, b uint16, ops []byte) { f.Add(a, b, uint8(3), ops) })
	f.Add(uint16(2), uint16(1000), uint8(0), []byte{0, 0, 2, 0, 1, 1, 0x01, 0xf4, 1, 0x01, 0xf4, 1, 0x0f, 0xa0, 1, 0, 1, 1})
	f.Fuzz(func(t *testing.T, limit, window uint16, shape uint8, ops []byte) {
		dur := time.Duration(1+int64(window%3000)) * time.Millisecond
		pn := limiter.Penalty{Duration: dur, MaxDuration: dur << (shape % 5), Decay: time.Duration(shape%4) * dur}
		p := penaltyPolicy(t, limiter.FixedWindowParams{Limit: 1 + int64(limit%10), Window: time.Duration(1+int64(window%5000)) * time.Millisecond},
			limiter.FixedWindow, pn)
		st, now := algorithm.State{}, t0
		d, m, y := pn.Duration.Milliseconds(), p.Penalty().MaxDuration.Milliseconds(), pn.Decay.Milliseconds()
		for i := 0; i+2 < len(ops); i += 3 {
			now = max(0, now+decode(ops[i], ops[i+1]))
			cost := 1 + int64(ops[i+2])%p.MaxCost()
			next, r, _, write := algorithm.Check(st, now, p, cost)
			eff := r.EffectiveNowMs
			switch {
			case r.Status == algorithm.StatusClockUnsafe:
				continue
			case st.Exists && eff < st.PenaltyUntilMs:
				left := st.PenaltyUntilMs - eff
				if r.Status != blocked || r.BlockLeftMs != left || r.RetryAfterMs < left || r.ResetAtMs < eff+r.RetryAfterMs ||
					r.Remaining != 0 || write || next != st {
					t.Fatalf("step %d: in a block until %d at %d: %+v write %v", i/3, st.PenaltyUntilMs, eff, r, write)
				}
				// The retry waits for the limit: at the block's end, the
				// limit admits the cost or needs exactly the rest.
				wait := int64(0)
				if _, at, own, _ := algorithm.Check(st, st.PenaltyUntilMs, p, cost); at.Status != allowed {
					wait = own.RetryAfterMs
				}
				if r.RetryAfterMs != left+wait {
					t.Fatalf("step %d: blocked until %d at %d with retry %d; the limit waits %d more after the block", i/3, st.PenaltyUntilMs, eff, r.RetryAfterMs, wait)
				}
			case r.Status == blocked:
				t.Fatalf("step %d: BLOCKED outside a block: %+v, state %+v", i/3, r, st)
			case r.Status == denied && st.Exists:
				level := int64(1)
				if st.PenaltyLevel > 0 && eff < st.PenaltyUntilMs+y {
					level = min(st.PenaltyLevel+1, 63)
				}
				block := next.PenaltyUntilMs - eff
				if !algorithm.PenaltyRecorded(st, next) || next.PenaltyLevel != level || block < d || block > m ||
					(block < m && block != d<<(level-1)) || r.RetryAfterMs < block {
					t.Fatalf("step %d: offence at %d on %+v: level %d, block %d (duration %d, max %d), reply %+v",
						i/3, eff, st, next.PenaltyLevel, block, d, m, r)
				}
				st = next
			case write:
				if next.PenaltyUntilMs != st.PenaltyUntilMs || next.PenaltyLevel != st.PenaltyLevel {
					t.Fatalf("step %d: an allowed request changed the penalty: %+v -> %+v", i/3, st, next)
				}
				st = next
			}
		}
	})
}
