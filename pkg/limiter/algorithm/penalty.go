package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// maxPenaltyLevel bounds State.PenaltyLevel: the block stops doubling long
// before (limiter.MaxPenalty is below 2^32 ms), the level only counts
// offences.
const maxPenaltyLevel = 63

// blocked reports whether st is in a block of pn at effective time now.
func blocked(pn limiter.Penalty, st State, now int64) bool {
	return pn.On() && st.Exists && now < st.PenaltyUntilMs
}

// offence is the block an offence at now earns on st (not blocked): level 1
// and pn's Duration, unless the previous block is still remembered (now
// before its end plus Decay), then one level more and twice the block, at
// most MaxDuration.
func offence(pn limiter.Penalty, st State, now int64) (level, block int64) {
	level = 1
	if st.PenaltyLevel > 0 && now < st.PenaltyUntilMs+pn.Decay.Milliseconds() {
		level = min(st.PenaltyLevel+1, maxPenaltyLevel)
	}
	block, maxMs := pn.Duration.Milliseconds(), pn.MaxDuration.Milliseconds()
	for i := int64(1); i < level && block < maxMs; i++ {
		block *= 2
	}
	return level, min(block, maxMs)
}

// memoryUntil is when st's penalty is forgotten (its block's end plus the
// decay), 0 when it holds none: every state TTL covers it.
func memoryUntil(pn limiter.Penalty, st State) int64 {
	if !pn.On() || st.PenaltyLevel == 0 {
		return 0
	}
	return st.PenaltyUntilMs + pn.Decay.Milliseconds()
}

// PenaltyRecorded reports whether Check recorded an offence: next, returned
// with write false, holds a new block that the store writes whatever its
// batch decides (the all-or-nothing rule is about consumption; an offence is
// a fact about the request). Only the penalty fields of next and its
// ExpiresAtMs differ from st. A store writes them only for a request whose
// role records offences (limiter.Role.RecordsOffence) and a state it held before the
// call; otherwise it answers Check's uncommitted reply, the limit's own
// denial.
func PenaltyRecorded(st, next State) bool {
	return next.PenaltyUntilMs != st.PenaltyUntilMs || next.PenaltyLevel != st.PenaltyLevel
}
