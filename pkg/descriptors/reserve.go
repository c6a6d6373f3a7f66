package descriptors

import (
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// rawReserve is a rate_limit's `reserve:` block as written: the ttl as a
// Go duration string, the estimate, and the position of each value.
type rawReserve struct {
	pos                 pos
	ttl                 string
	estimate            int64
	ttlPos, estimatePos pos
	// ttlRead is false when the ttl was not a string (reported).
	ttlRead bool
}

// reserveFields are the keys of a reserve block.
var reserveFields = fields[rawReserve]{
	{"ttl", func(p *parser, r *rawReserve, _, v *yaml.Node) {
		r.ttlPos = at(v)
		r.ttl, r.ttlRead = p.str(v, "reserve.ttl")
	}},
	{"estimate", func(p *parser, r *rawReserve, _, v *yaml.Node) {
		r.estimatePos = at(v)
		r.estimate, _ = p.integer(v, "reserve.estimate", math.MinInt64, math.MaxInt64)
	}},
}

// reserve parses a `reserve:` mapping.
func (p *parser) reserve(n *yaml.Node) *rawReserve {
	return block(p, n, reserveFields, "reserve", "reserve must be a mapping {"+reserveFields.keys()+"}, got null", func(at pos) *rawReserve { return &rawReserve{pos: at} })
}

// checkReserve turns a parsed reserve into a limiter.Reserve, reporting
// each mistake at its position through bad. What the limiter decides (the
// limits that take a reserve, the bounds of ttl and estimate) it refuses
// when the policy is built, at the position reserveAt finds; a ttl of 0 is
// refused here, as the limiter reads it as no reserve at all.
func checkReserve(rr *rawReserve, bad func(pos, string, ...any)) (limiter.Reserve, bool) {
	if rr == nil {
		return limiter.Reserve{}, true
	}
	if !rr.ttlPos.set() {
		bad(rr.pos, "reserve needs a ttl (e.g. ttl: 10m): how long a reservation is held when no settle comes")
		return limiter.Reserve{}, false
	}
	if !rr.ttlRead {
		return limiter.Reserve{}, false // reported by the parser
	}
	d, err := time.ParseDuration(rr.ttl)
	switch {
	case err != nil:
		bad(rr.ttlPos, "reserve.ttl %q is not a duration (e.g. 10m, 1h30m, 500ms)", truncate(rr.ttl, 40))
	case d == 0:
		bad(rr.ttlPos, "reserve ttl must be whole milliseconds between 1ms and %s", limiter.MaxLeaseTTL)
	default:
		return limiter.Reserve{TTL: d, Estimate: rr.estimate}, true
	}
	return limiter.Reserve{}, false
}

// reserveAt is where the limiter's refusal of rl's reserve, reason, is
// reported: at the ttl or the estimate it names, else at the key.
func reserveAt(rl *rawLimit, reason string) pos {
	switch {
	case rl.reserve != nil && strings.HasPrefix(reason, "ttl") && rl.reserve.ttlPos.set():
		return rl.reserve.ttlPos
	case rl.reserve != nil && strings.HasPrefix(reason, "estimate") && rl.reserve.estimatePos.set():
		return rl.reserve.estimatePos
	}
	return rl.reservePos
}
