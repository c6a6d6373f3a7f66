package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// Lease evaluates one lease operation of cost leases on a concurrency
// policy's lease set at store time nowMs (Unix ms in [0, 2^53-1]), exactly
// as the Lua lease program does (docs/algorithms.md). It is a pure
// function.
//
// set is the stored lease set ("" when there is none): the expiry time and
// count of the leases held, soonest first, packed as a sliding log is
// (AppendSlidingLogEntry, one entry per take). Leases whose
// expiry is at or before nowMs are no longer held. next is the set to store
// when write is true (next "" means delete it); expiresAtMs is when it may be
// dropped (its latest expiry plus the cleanup grace).
//
// A take (LeaseTake) of a request that consumes (consumes true) is
// ALLOWED and adds an entry of cost leases expiring at nowMs+TTL, but at
// least 1 ms after the latest held one (so each take's expiry is its own,
// and a clock that stepped back extends it), iff held + cost <= limit; otherwise DENIED with nothing changed and RetryAfter until
// enough leases expire. The ResetAtMs of a take that consumed is the
// expiry of the leases it took: their identity, which a release gives as
// at. A take that does not consume (a check, a probe) answers the same and
// writes nothing. A release (LeaseRelease) or a return (LeaseReturn) with
// at > 0 removes at most cost of the leases that expire at at, none when
// none of them is held any more (they expired: the request outlived its
// lease, and no other request's lease is freed for it); with at 0 a
// release removes min(cost, held) leases, soonest-expiring first, and a
// return the latest-expiring. Both are always ALLOWED. Remaining is limit - held
// after the operation (0 when more are held than the limit); ResetAt is
// when the last held lease expires (nowMs when none is). A set that is not
// a lease set (whole entries, expiries ascending and integral, counts at
// least 1, at most MaxConcurrency entries) is STATE_INCOMPATIBLE and left
// alone; a time too close to 2^53 ms for an expiry to stay exact is
// INVALID.
func Lease(set string, nowMs int64, p *limiter.Policy, op limiter.LeaseOp, at, cost int64, consumes bool) (next string, reply Reply, expiresAtMs int64, write bool) {
	limit := p.Limit()
	reply = Reply{ServerNowMs: nowMs, EffectiveNowMs: nowMs, Limit: limit}
	if nowMs < 0 || nowMs > limiter.MaxSafeInteger-limiter.MaxLeaseTTL.Milliseconds()-limiter.MaxDurationMillis {
		// So far in the future that an expiry plus the grace could leave
		// the exact integers: refused, as the Lua program refuses it.
		reply.Status, reply.Limit = StatusInvalid, 0
		return set, reply, 0, false
	}
	if !validLeaseSet(set) {
		reply.Status = StatusStateIncompatible
		return set, reply, 0, false
	}
	// Drop the expired leases.
	n := len(set) / SlidingLogEntryBytes
	from, held := n, int64(0)
	for i := range n {
		t, c := logEntry(set, i)
		if t > nowMs {
			if from == n {
				from = i
			}
			held += c
		}
	}
	live := set[from*SlidingLogEntryBytes:]
	pruned := len(live) != len(set)
	switch op {
	case limiter.LeaseTake:
		if held+cost > limit {
			reply.Status = StatusDenied
			reply.Remaining = max(0, limit-held)
			reply.ResetAtMs = leaseResetAt(live, nowMs)
			reply.RetryAfterMs = leaseRetry(live, nowMs, held+cost-limit)
			return set, reply, 0, false
		}
		reply.Status = StatusAllowed
		if !consumes {
			reply.Remaining, reply.ResetAtMs = limit-held, leaseResetAt(live, nowMs)
			return set, reply, 0, false
		}
		// After the latest held lease, by at least 1 ms: each take's
		// leases have an expiry of their own, their identity.
		var e [SlidingLogEntryBytes]byte
		next = live + string(AppendSlidingLogEntry(e[:0], max(nowMs+p.LeaseTTLMillis(), leaseResetAt(live, 0)+1), cost))
		held += cost
	case limiter.LeaseRelease, limiter.LeaseReturn:
		reply.Status = StatusAllowed
		var take int64
		if at > 0 {
			take = min(cost, leasesAt(live, at))
		} else {
			take = min(cost, held)
		}
		if take == 0 && !pruned {
			reply.Remaining, reply.ResetAtMs = max(0, limit-held), leaseResetAt(live, nowMs)
			return set, reply, 0, false
		}
		switch {
		case at > 0:
			next = removeLeasesAt(live, at, take)
		default:
			next = removeLeases(live, take, op == limiter.LeaseReturn)
		}
		held -= take
	default:
		reply.Status = StatusInvalid
		reply.Limit = 0
		return set, reply, 0, false
	}
	reply.Remaining, reply.ResetAtMs = max(0, limit-held), leaseResetAt(next, nowMs)
	if next != "" {
		expiresAtMs = reply.ResetAtMs + p.CleanupGraceMillis()
	}
	return next, reply, expiresAtMs, true
}

// validLeaseSet: whole entries, at most MaxConcurrency of them, each an
// integral expiry in [1, 2^53-1] not before the previous one (equal only
// when a count overflowed an entry) and a count
// of at least 1.
func validLeaseSet(set string) bool {
	n := len(set) / SlidingLogEntryBytes
	if len(set)%SlidingLogEntryBytes != 0 || n > limiter.MaxConcurrency {
		return false
	}
	prev := 1.0
	for i := range n {
		t := logTime(set, i)
		at, c := logEntry(set, i)
		if !(t >= prev && t <= float64(limiter.MaxSafeInteger)) || float64(at) != t || c == 0 {
			return false
		}
		prev = t
	}
	return true
}

// leaseResetAt is the expiry of the last lease of a live set, or nowMs
// when it is empty.
func leaseResetAt(live string, nowMs int64) int64 {
	if live == "" {
		return nowMs
	}
	t, _ := logEntry(live, len(live)/SlidingLogEntryBytes-1)
	return t
}

// leaseRetry is how long until need leases of a live set have expired
// (soonest first): at least 1 ms.
func leaseRetry(live string, nowMs, need int64) int64 {
	freed := int64(0)
	for i := range len(live) / SlidingLogEntryBytes {
		t, c := logEntry(live, i)
		if freed += c; freed >= need {
			return max(1, t-nowMs)
		}
	}
	// More than the limit can ever hold (the caller bounds cost by the
	// limit): retry when every lease has expired.
	return max(1, leaseResetAt(live, nowMs)-nowMs)
}

// leasesAt is the number of leases of a live set that expire at atMs.
func leasesAt(live string, atMs int64) int64 {
	n := int64(0)
	for i := range len(live) / SlidingLogEntryBytes {
		if t, c := logEntry(live, i); t == atMs {
			n += c
		} else if t > atMs {
			break
		}
	}
	return n
}

// removeLeasesAt removes count leases (at most leasesAt) expiring at atMs
// from a live set: an entry left without leases is dropped.
func removeLeasesAt(live string, atMs, count int64) string {
	var b []byte
	var e [SlidingLogEntryBytes]byte
	for i := range len(live) / SlidingLogEntryBytes {
		t, c := logEntry(live, i)
		if t == atMs && count > 0 {
			k := min(c, count)
			count -= k
			if c -= k; c == 0 {
				continue
			}
		}
		b = append(b, AppendSlidingLogEntry(e[:0], t, c)...)
	}
	return string(b)
}

// removeLeases removes count leases (at most those held) from a live set:
// the soonest-expiring first, or the latest-expiring first when latest.
func removeLeases(live string, count int64, latest bool) string {
	n := len(live) / SlidingLogEntryBytes
	var e [SlidingLogEntryBytes]byte
	if !latest {
		for i := range n {
			t, c := logEntry(live, i)
			if count < c {
				return string(AppendSlidingLogEntry(e[:0], t, c-count)) + live[(i+1)*SlidingLogEntryBytes:]
			}
			count -= c
		}
		return ""
	}
	for i := n - 1; i >= 0; i-- {
		t, c := logEntry(live, i)
		if count < c {
			return live[:i*SlidingLogEntryBytes] + string(AppendSlidingLogEntry(e[:0], t, c-count))
		}
		count -= c
	}
	return ""
}
