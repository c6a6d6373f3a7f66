package rls

import (
	"fmt"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// Bounds on one ShouldRateLimit request. A request outside them is answered
// InvalidArgument with a message naming the bound (never the offending value).
const (
	MaxDescriptors  = 64
	MaxEntries      = 16
	MaxDomainBytes  = 1024
	MaxKeyBytes     = 1024
	MaxValueBytes   = 1024
	maxSafeHitsCost = 1<<53 - 1
	// maxOverrideWindow bounds the window of a request-supplied limit
	// override (unit × unit_multiplier).
	maxOverrideWindow = 10 * 365 * 24 * time.Hour
)

// boundError is a request that violates a bound; the message is safe to
// return to the caller and to log (lengths and indexes only).
type boundError struct{ msg string }

func (e *boundError) Error() string { return e.msg }

func boundf(format string, args ...any) error {
	return &boundError{msg: "rls: " + fmt.Sprintf(format, args...)}
}

// validateRequest checks every bound. It allocates only on failure.
func validateRequest(req *rlsv3.RateLimitRequest) error {
	if req == nil {
		return boundf("request is empty")
	}
	if req.Domain == "" {
		return boundf("domain is empty")
	}
	if len(req.Domain) > MaxDomainBytes {
		return boundf("domain is %d bytes, above the %d-byte bound", len(req.Domain), MaxDomainBytes)
	}
	n := len(req.Descriptors)
	if n == 0 {
		return boundf("descriptors is empty: at least one descriptor is required")
	}
	if n > MaxDescriptors {
		return boundf("%d descriptors, above the bound of %d", n, MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return boundf("descriptor %d has no entries: at least one is required", i)
		}
		if len(d.Entries) > MaxEntries {
			return boundf("descriptor %d has %d entries, above the bound of %d", i, len(d.Entries), MaxEntries)
		}
		for j, e := range d.Entries {
			switch {
			case e == nil || e.Key == "":
				return boundf("descriptor %d entry %d: key is empty", i, j)
			case len(e.Key) > MaxKeyBytes:
				return boundf("descriptor %d entry %d: key is %d bytes, above the %d-byte bound", i, j, len(e.Key), MaxKeyBytes)
			case len(e.Value) > MaxValueBytes:
				return boundf("descriptor %d entry %d: value is %d bytes, above the %d-byte bound", i, j, len(e.Value), MaxValueBytes)
			}
		}
		if d.Limit != nil {
			unit, ok := overrideUnit(d.Limit.Unit)
			if !ok {
				return boundf("descriptor %d: limit override unit %d is not one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR", i, int32(d.Limit.Unit))
			}
			if m := d.Limit.GetUnitMultiplier().GetValue(); m > 1 && unit.Duration()*time.Duration(m) > maxOverrideWindow {
				return boundf("descriptor %d: limit override window (unit × unit_multiplier %d) is above the bound of %s", i, m, maxOverrideWindow)
			}
		}
	}
	return nil
}

// hitsFor returns the cost of descriptor d: its own hits_addend when set,
// else the request's, where zero means one. An explicit per-descriptor zero
// (the field is a wrapper, so zero differs from unset) is a probe: cost 1,
// checked and never consumed (limiter.RoleProbe), asking whether one more
// hit would be allowed now.
func hitsFor(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) (cost int64, probe bool) {
	asked, probe := askedHits(req, d)
	return int64(min(asked, maxSafeHitsCost)), probe
}

// askedHits is hitsFor's cost before any bound: the hits_addend as sent
// (the audit record carries it).
func askedHits(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) (hits uint64, probe bool) {
	if h := d.HitsAddend; h != nil {
		if h.Value == 0 {
			return 1, true
		}
		return h.Value, false
	}
	if req.HitsAddend == 0 {
		return 1, false
	}
	return uint64(req.HitsAddend), false
}

// units maps each configured unit (by its value, descriptors.UnitSecond
// = 1 … UnitYear) to the unit of a descriptor's limit override (the request
// enum, which has no week) and to the response enum.
var units = [...]struct {
	override typev3.RateLimitUnit
	response rlsv3.RateLimitResponse_RateLimit_Unit
}{
	descriptors.UnitSecond: {typev3.RateLimitUnit_SECOND, rlsv3.RateLimitResponse_RateLimit_SECOND},
	descriptors.UnitMinute: {typev3.RateLimitUnit_MINUTE, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	descriptors.UnitHour:   {typev3.RateLimitUnit_HOUR, rlsv3.RateLimitResponse_RateLimit_HOUR},
	descriptors.UnitDay:    {typev3.RateLimitUnit_DAY, rlsv3.RateLimitResponse_RateLimit_DAY},
	descriptors.UnitWeek:   {typev3.RateLimitUnit_UNKNOWN, rlsv3.RateLimitResponse_RateLimit_WEEK},
	descriptors.UnitMonth:  {typev3.RateLimitUnit_MONTH, rlsv3.RateLimitResponse_RateLimit_MONTH},
	descriptors.UnitYear:   {typev3.RateLimitUnit_YEAR, rlsv3.RateLimitResponse_RateLimit_YEAR},
}

// overrideUnit maps the unit of a descriptor's limit override.
func overrideUnit(u typev3.RateLimitUnit) (descriptors.Unit, bool) {
	for c := descriptors.UnitSecond; c <= descriptors.UnitYear; c++ {
		if u != typev3.RateLimitUnit_UNKNOWN && units[c].override == u {
			return c, true
		}
	}
	return 0, false
}

// responseUnit maps a configured unit to the response enum.
func responseUnit(u descriptors.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	if u >= descriptors.UnitSecond && u <= descriptors.UnitYear {
		return units[u].response
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}
