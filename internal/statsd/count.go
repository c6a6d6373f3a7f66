package statsd

import "github.com/envoy-rls/envoy-rls/pkg/rls"

// RuleStats are the per-rule counter names, in the order of Counts'
// values: each is sent as RulePrefix + StatKey + "." + name.
var RuleStats = [...]string{TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode, OverLimitWithLocalCache, OverLimitWithPenalty}

// Counts are the hits one limit observation adds to each per-rule counter,
// indexed like RuleStats.
type Counts [len(RuleStats)]uint64

// Indexes of Counts.
const (
	iTotalHits = iota
	iOverLimit
	iNearLimit
	iWithinLimit
	iShadowMode
	iOverLocal
	iOverPenalty
)

// Count is what one limit adds to the per-rule counters: total_hits
// always; over_limit (and shadow_mode for a shadow rule,
// over_limit_with_local_cache when the local deny cache answered,
// over_limit_with_penalty in the penalty box) when it denied;
// within_limit, and near_limit for the hits above floor(limit ×
// nearRatio), when it allowed. A limit whose store failed counts
// total_hits only; a probe (0 hits) counts nothing.
func Count(o rls.LimitObservation, nearRatio float64) Counts {
	var c Counts
	if o.Hits <= 0 {
		return c
	}
	hits := uint64(o.Hits)
	c[iTotalHits] = hits
	switch {
	case o.StoreFailed:
	case o.Over:
		c[iOverLimit] = hits
		if o.Shadow {
			c[iShadowMode] = hits
		}
		if o.LocalCache {
			c[iOverLocal] = hits
		}
		if o.Penalty {
			c[iOverPenalty] = hits
		}
	default:
		c[iWithinLimit] = hits
		c[iNearLimit] = nearHits(o, nearRatio)
	}
	return c
}

// nearHits is the part of an allowed limit's hits that lies above the
// near-limit threshold floor(limit × ratio): the usage after the hits (as
// if consumed) minus the larger of the threshold and the usage before
// them.
func nearHits(o rls.LimitObservation, ratio float64) uint64 {
	if !o.Decided || o.Limit <= 0 {
		return 0
	}
	used := o.Limit - o.Remaining
	if !o.Consumed {
		used += o.Hits
	}
	threshold := int64(float64(o.Limit) * ratio)
	if used <= threshold {
		return 0
	}
	before := max(used-o.Hits, threshold)
	return uint64(used - before)
}
