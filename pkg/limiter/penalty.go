package limiter

import (
	"fmt"
	"time"
)

// MaxPenalty bounds every duration of a Penalty: 30 days.
const MaxPenalty = 30 * 24 * time.Hour

// maxPenaltyLevel bounds State.PenaltyLevel: the block stops doubling long
// before (MaxPenalty is below 2^32 ms), the level only counts offences.
const maxPenaltyLevel = 63

// Penalty is a limit's penalty box: a subject denied by the limit (an
// offence) is blocked for Duration whatever its window; an offence while the
// previous block is still remembered (it ended less than Decay ago) doubles
// the block, up to MaxDuration. The zero value is no penalty.
type Penalty struct {
	// Duration of the first block; 0 turns the penalty off. (Required for a
	// penalty: whole ms in [1ms, MaxPenalty])
	Duration time.Duration
	// MaxDuration caps the doubled block. (Optional, default Duration: no
	// doubling; whole ms in [Duration, MaxPenalty])
	MaxDuration time.Duration
	// Decay is how long after a block ended an offence still doubles it.
	// (Optional, default 0: every offence gets Duration; whole ms in [0,
	// MaxPenalty])
	Decay time.Duration
}

// On reports whether the penalty box is enabled.
func (pn Penalty) On() bool { return pn.Duration != 0 }

// validate checks pn and fills its default; limit is the policy's limit (a
// zero limit denies every request: a penalty on it is refused).
func (pn Penalty) validate(limit int64) (Penalty, error) {
	if !pn.On() {
		if pn.MaxDuration != 0 || pn.Decay != 0 {
			return pn, &FieldError{Field: "penalty.duration", Reason: "is required with max_duration or decay"}
		}
		return pn, nil
	}
	maxMs := MaxPenalty.Milliseconds()
	if err := durationField("penalty.duration", pn.Duration, 1); err != nil {
		return pn, err
	}
	if pn.Duration.Milliseconds() > maxMs {
		return pn, &FieldError{Field: "penalty.duration", Reason: fmt.Sprintf("must be at most %s", MaxPenalty)}
	}
	if pn.MaxDuration == 0 {
		pn.MaxDuration = pn.Duration
	}
	if err := durationField("penalty.max_duration", pn.MaxDuration, pn.Duration.Milliseconds()); err != nil {
		return pn, err
	}
	if pn.MaxDuration.Milliseconds() > maxMs {
		return pn, &FieldError{Field: "penalty.max_duration", Reason: fmt.Sprintf("must be between the duration (%s) and %s", pn.Duration, MaxPenalty)}
	}
	if err := durationField("penalty.decay", pn.Decay, 0); err != nil {
		return pn, err
	}
	if pn.Decay.Milliseconds() > maxMs {
		return pn, &FieldError{Field: "penalty.decay", Reason: fmt.Sprintf("must be at most %s", MaxPenalty)}
	}
	if limit == 0 {
		return pn, &FieldError{Field: "penalty", Reason: "needs a limit above 0 (a zero limit denies every request)"}
	}
	return pn, nil
}

// Penalty returns the policy's penalty box (the zero Penalty when it has
// none), its defaults filled.
func (p *Policy) Penalty() Penalty { return p.spec.Penalty }

// PenaltyArgs returns the penalty in ms as the Lua batch program takes it:
// duration, max duration, decay; all 0 without a penalty.
func (p *Policy) PenaltyArgs() (durationMs, maxMs, decayMs int64) {
	pn := p.spec.Penalty
	return pn.Duration.Milliseconds(), pn.MaxDuration.Milliseconds(), pn.Decay.Milliseconds()
}

// blocked reports whether st is in a block at effective time now.
func (pn Penalty) blocked(st State, now int64) bool {
	return pn.On() && st.Exists && now < st.PenaltyUntilMs
}

// offence is the block an offence at now earns on st (not blocked): level 1
// and Duration, unless the previous block is still remembered (now before
// its end plus Decay), then one level more and twice the block, at most
// MaxDuration.
func (pn Penalty) offence(st State, now int64) (level, block int64) {
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
func (pn Penalty) memoryUntil(st State) int64 {
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
// role records offences (Role.RecordsOffence) and a state it held before the
// call; otherwise it answers Check's uncommitted reply, the limit's own
// denial.
func PenaltyRecorded(st, next State) bool {
	return next.PenaltyUntilMs != st.PenaltyUntilMs || next.PenaltyLevel != st.PenaltyLevel
}

// RecordsOffence reports whether a denial of a limit in this role is an
// offence that is written: the roles that consume (Consumes: ordinary,
// shadow, quota). A check or a probe (RoleCheck, RoleProbe, RoleQuotaProbe)
// reports a block, and a probe's BLOCKED blocks its batch as its denial
// would, but neither ever causes one: asking whether there is room is not
// an attempt. A shadow limit records its offences, so that it reports the
// blocks it would enforce.
func (r Role) RecordsOffence() bool { return r.Consumes() }
