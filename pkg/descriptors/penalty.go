package descriptors

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// rawPenalty is a rate_limit's `penalty:` block as written: each duration
// as a Go duration string ("10m", "1h30m") and the position of its key.
type rawPenalty struct {
	pos                           pos
	duration, maxDuration, decay  string
	durationPos, maxPos, decayPos pos
}

// penalty parses a `penalty:` mapping.
func (p *parser) penalty(n *yaml.Node) *rawPenalty {
	n = p.resolve(n)
	if n == nil {
		return nil
	}
	rp := &rawPenalty{pos: at(n)}
	if isNull(n) {
		p.errorf(n, "penalty must be a mapping {duration, max_duration, decay}, got null")
		return nil
	}
	ok := p.mapping(n, "penalty", func(key string, k, v *yaml.Node) {
		switch key {
		case "duration":
			rp.durationPos = at(v)
			rp.duration, _ = p.str(v, "penalty.duration")
		case "max_duration":
			rp.maxPos = at(v)
			rp.maxDuration, _ = p.str(v, "penalty.max_duration")
		case "decay":
			rp.decayPos = at(v)
			rp.decay, _ = p.str(v, "penalty.decay")
		default:
			p.errorf(k, "unknown key %q in penalty (expected duration, max_duration, decay)", key)
		}
	})
	if !ok {
		return nil
	}
	return rp
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
