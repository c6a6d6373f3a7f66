package limiter

import (
	"fmt"
	"time"
)

// MaxPenalty bounds every duration of a Penalty: 30 days.
const MaxPenalty = 30 * 24 * time.Hour

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

// RecordsOffence reports whether a denial of a limit in this role is an
// offence that is written: the roles that consume (Consumes: ordinary,
// shadow, quota). A check or a probe (RoleCheck, RoleProbe, RoleQuotaProbe)
// reports a block, and a probe's BLOCKED blocks its batch as its denial
// would, but neither ever causes one: asking whether there is room is not
// an attempt. A shadow limit records its offences, so that it reports the
// blocks it would enforce.
func (r Role) RecordsOffence() bool { return r.Consumes() }
