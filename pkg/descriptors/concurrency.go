package descriptors

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// The release marker: a descriptor whose last entry has the key
// ReleaseKey and whose other entries match a concurrency rule gives back
// leases of that rule instead of taking one (Release), when the entry's
// value is a marker the service wrote (pkg/rls) or ReleaseValue. Envoy
// sends it from a rate limit with apply_on_stream_done, whose last action
// is a metadata action reading the field "lease" of the take's answer.
const (
	ReleaseKey   = "lease"
	ReleaseValue = "release"
)

// Release reports whether entries end with an entry of the key
// ReleaseKey (after at least one other), and returns the others and that
// entry's value. The caller checks the value, matches the rest and treats
// the descriptor as a release only when both hold; otherwise the whole
// descriptor is matched as any other.
func Release(entries []Entry) (rest []Entry, value string, ok bool) {
	n := len(entries)
	if n < 2 || entries[n-1].Key != ReleaseKey {
		return entries, "", false
	}
	return entries[:n-1], entries[n-1].Value, true
}

// checkConcurrency reads a concurrency limit (`concurrency: N` and
// `lease_ttl`) into ls: algorithm limiter.Concurrency, limit N. The
// window keys and the rate algorithms' extensions have no meaning for it
// and are refused; failure_mode, revision, headers, name and replaces
// apply as to any limit.
func (c *compiler) checkConcurrency(rl *rawLimit, ls *limitSpec, bad func(p pos, format string, args ...any)) {
	ls.algorithm, ls.rpu = limiter.Concurrency, rl.concurrency
	if !rl.concurrencyPos.set() {
		bad(rl.leaseTTLPos, "lease_ttl needs concurrency: N (the leases that may be held at once)")
	}
	for _, f := range []struct {
		p    pos
		name string
	}{{rl.unitPos, "unit"}, {rl.rpuPos, "requests_per_unit"}, {rl.unitMultiplierPos, "unit_multiplier"},
		{rl.algorithmPos, "algorithm"}, {rl.burstPos, "burst"}, {rl.calendarPos, "calendar"},
		{rl.timeZonePos, "time_zone"}, {rl.penaltyPos, "penalty"}} {
		if f.p.set() {
			bad(f.p, "%s is not allowed with concurrency (a concurrency limit counts requests in flight, not per unit of time)", f.name)
		}
	}
	if !rl.leaseTTLPos.set() {
		if rl.concurrencyPos.set() {
			bad(rl.concurrencyPos, "concurrency needs a lease_ttl (e.g. lease_ttl: 10m): how long a lease is held when no release comes")
		}
		return
	}
	d, err := time.ParseDuration(rl.leaseTTL)
	switch {
	case err != nil:
		bad(rl.leaseTTLPos, "lease_ttl %q is not a duration (e.g. 10m, 1h30m, 500ms)", truncate(rl.leaseTTL, 40))
	case d%time.Millisecond != 0 || d < time.Millisecond || d > limiter.MaxLeaseTTL:
		bad(rl.leaseTTLPos, "lease_ttl %s must be whole milliseconds between 1ms and %s", d, limiter.MaxLeaseTTL)
	default:
		ls.leaseTTL = d
	}
}
