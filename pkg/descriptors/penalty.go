package descriptors

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// rawPenalty is a rate_limit's `penalty:` block as written: each duration
// as a Go duration string ("10m", "1h30m") and the position of its value.
type rawPenalty struct {
	pos                           pos
	duration, maxDuration, decay  string
	durationPos, maxPos, decayPos pos
}

// penaltyFields are the keys of a penalty block. Each duration keeps the
// position of its value, where a mistake in it is reported.
var penaltyFields = fields[rawPenalty]{
	durationField("duration", func(r *rawPenalty) (*string, *pos) { return &r.duration, &r.durationPos }),
	durationField("max_duration", func(r *rawPenalty) (*string, *pos) { return &r.maxDuration, &r.maxPos }),
	durationField("decay", func(r *rawPenalty) (*string, *pos) { return &r.decay, &r.decayPos }),
}

// durationField reads the duration key of a penalty as written.
func durationField(key string, get func(*rawPenalty) (*string, *pos)) field[rawPenalty] {
	return field[rawPenalty]{key, func(p *parser, r *rawPenalty, _, v *yaml.Node) {
		dst, valuePos := get(r)
		*valuePos = at(v)
		*dst, _ = p.str(v, "penalty."+key)
	}}
}

// penalty parses a `penalty:` mapping.
func (p *parser) penalty(n *yaml.Node) *rawPenalty {
	return block(p, n, penaltyFields, "penalty", "penalty must be a mapping {"+penaltyFields.keys()+"}, got null", func(at pos) *rawPenalty { return &rawPenalty{pos: at} })
}

// checkPenalty turns a parsed penalty into a limiter.Penalty, reporting each
// mistake at its position through bad. The limiter's own rules (bounds,
// max_duration >= duration, a limit above 0) are checked with the policy.
func checkPenalty(rp *rawPenalty, bad func(p pos, format string, args ...any)) (limiter.Penalty, bool) {
	var pn limiter.Penalty
	if rp == nil {
		return pn, true
	}
	ok := true
	field := func(s string, at pos, name string, required bool) time.Duration {
		if !at.set() {
			if required {
				bad(rp.pos, "penalty needs a duration (e.g. duration: 10m)")
				ok = false
			}
			return 0
		}
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			bad(at, "penalty.%s %q is not a duration (e.g. 10m, 1h30m, 500ms)", name, truncate(s, 40))
		case d%time.Millisecond != 0:
			bad(at, "penalty.%s %s must be whole milliseconds", name, d)
		case required && d <= 0:
			bad(at, "penalty.%s %s must be positive", name, d)
		case d < 0:
			bad(at, "penalty.%s %s must not be negative", name, d)
		case d > limiter.MaxPenalty:
			bad(at, "penalty.%s %s is above the maximum %s (30 days)", name, d, limiter.MaxPenalty)
		default:
			return d
		}
		ok = false
		return 0
	}
	pn.Duration = field(rp.duration, rp.durationPos, "duration", true)
	pn.MaxDuration = field(rp.maxDuration, rp.maxPos, "max_duration", false)
	pn.Decay = field(rp.decay, rp.decayPos, "decay", false)
	if ok && rp.maxPos.set() && pn.MaxDuration < pn.Duration {
		bad(rp.maxPos, "penalty.max_duration %s is below the duration %s", pn.MaxDuration, pn.Duration)
		ok = false
	}
	return pn, ok
}

// penaltyReason words a limiter error about the penalty for a rule file.
func penaltyReason(fe *limiter.FieldError) string {
	if fe.Field == "penalty" {
		return "penalty " + fe.Reason + "; remove the penalty or set requests_per_unit"
	}
	return fmt.Sprintf("%s %s", fe.Field, fe.Reason)
}
