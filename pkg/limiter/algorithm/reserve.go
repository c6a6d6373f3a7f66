package algorithm

import (
	"encoding/binary"
	"math"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// ReservationEntryBytes is the size of one reservation in State.Reserved:
// its identity (its expiry, Unix ms) and its amount (the units it
// consumed), each a big-endian IEEE-754 double, exact below 2^53: the Lua
// programs' struct.pack('>dd'). An amount of 0 marks the identity of a
// settled reservation, kept (as the last entry only) while it could still
// be issued again, so that no identity names two reservations of a state.
const ReservationEntryBytes = 16

// maxShiftMs bounds how far after now + TTL a reservation's identity is
// pushed to stay after the previous one's (several reserves in one ms): a
// reserve that would be pushed further is denied until the clock catches
// up. It keeps the time the identity names (identity - TTL) within that
// many ms of the reserve, never past the end of its window.
const maxShiftMs = limiter.MaxReservations

// CheckRequest is Check of req (its policy, cost and lease operation) at
// store time serverNowMs. A request of a policy without reservations
// (req.Reserves false) is Check of its cost, unchanged. On a reserving
// policy (limiter.Reserve), after the checks of Check, the reservations
// whose identity is at or before the effective now are dropped (what they
// consumed stays consumed: an unsettled reservation is charged at its
// estimate), then:
//
//   - a reserve (LeaseTake) is the algorithm's step for its amount (the
//     policy's estimate when not 0, else the request's cost), with the
//     live reservations already consumed, so remaining counts them; when
//     allowed it holds a reservation of that amount whose identity, after
//     now + TTL and after every earlier identity of the state, is the
//     reply's HoldAtMs. It is DENIED, and consumes nothing (a ChargeAlways
//     policy's included), when the step denies, when MaxReservations are
//     live (retry when the soonest expires), or when its identity would
//     lie more than maxShiftMs after now + TTL or name a time in another
//     window than now's (retry when it no longer would);
//   - a settle (LeaseRelease) naming a live reservation (LeaseAt) removes
//     it and charges the request's cost (the actual usage, 0 allowed)
//     minus its amount: an excess as a ChargeAlways policy records a
//     denial (past the limit, up to the Ceiling), a shortfall given back
//     by the algorithm's refund rule at the reservation's time (its
//     identity minus the TTL: fixed window the same window or calendar
//     period, sliding window the same or the next, token bucket and GCRA
//     a state written since; never below 0 nor above the capacity). A settle naming no
//     live reservation (expired, settled already, never held) changes
//     nothing; with LeaseAt 0 it is a charge of its cost, as ChargeAlways
//     records it. Its reply is what a request of cost 0 meets after it
//     (for an excess: the charge's reply), DENIED when the usage is past
//     the limit: a store's batch rule never lets a settle block its batch.
//
// Every reply says the units the live reservations hold (ReservedUnits:
// after the request when it writes, before it otherwise) and, when it
// writes, how many expired ones it dropped (Expired).
//
// next carries the live reservations and expires no sooner than the latest
// identity plus the cleanup grace. uncommitted is, for a reserve, its reply
// before the cost and without the reservation; for a settle, what a
// request of cost 0 meets on st. A time so close to 2^53 ms that an
// identity could leave the exact integers is INVALID.
func CheckRequest(st State, serverNowMs int64, req *limiter.Request) (next State, reply, uncommitted Reply, write bool) {
	p := req.Policy
	if !req.Reserves() {
		return Check(st, serverNowMs, p, req.Cost)
	}
	rules := rulesOf(p)
	if rules == nil || serverNowMs > limiter.MaxSafeInteger-limiter.MaxLeaseTTL.Milliseconds()-limiter.MaxDurationMillis-maxShiftMs {
		r := refusal(StatusInvalid, serverNowMs, p)
		r.Limit = 0
		return st, r, r, false
	}
	now, r, ok := admit(st, serverNowMs, p)
	if !ok {
		return st, r, r, false
	}
	live, expired := pruneReserved(st.Reserved, now)
	switch req.Lease {
	case limiter.LeaseTake:
		cost := p.Reserve().Estimate
		if cost == 0 {
			cost = req.Cost
		}
		next, reply, uncommitted, write = reserve(rules, st, live, serverNowMs, now, p, cost)
	case limiter.LeaseRelease:
		next, reply, uncommitted, write = settle(rules, st, live, serverNowMs, now, p, req.LeaseAt, req.Cost)
	default:
		r = refusal(StatusInvalid, serverNowMs, p)
		r.Limit = 0
		return st, r, r, false
	}
	uncommitted.ReservedUnits = reservedUnits(live)
	reply.ReservedUnits = uncommitted.ReservedUnits
	if write {
		reply.ReservedUnits, reply.Expired = reservedUnits(next.Reserved), expired
	}
	return next, reply, uncommitted, write
}

// reservedUnits is the units the reservations of res hold.
func reservedUnits(res string) int64 {
	var units int64
	for i := range len(res) / ReservationEntryBytes {
		_, amount := reservationAt(res, i)
		units += amount
	}
	return units
}

// reserve is CheckRequest of a reserve of cost on st, whose live
// reservations are live.
func reserve(r *rules, st State, live string, serverNowMs, now int64, p *limiter.Policy, cost int64) (next State, reply, uncommitted Reply, write bool) {
	next, reply, uncommitted, write = checkAt(r, st, serverNowMs, now, p, cost, false)
	if !write {
		return st, reply, uncommitted, false
	}
	ttl := p.Reserve().TTL.Milliseconds()
	id := now + ttl
	if n := len(live) / ReservationEntryBytes; n > 0 {
		last, _ := reservationAt(live, n-1)
		id = max(id, last+1)
	}
	shift := id - (now + ttl)
	held := reservationsHeld(live)
	if held >= limiter.MaxReservations || shift > maxShiftMs || !sameWindow(p, now, id-ttl) {
		retry := shift
		if held >= limiter.MaxReservations {
			soonest, _ := reservationAt(live, 0)
			retry = soonest - now
		}
		d := uncommitted
		d.Status, d.RetryAfterMs = StatusDenied, max(1, retry)
		return st, d, d, false
	}
	// A settled reservation's identity kept last goes: id is after it.
	if held < len(live)/ReservationEntryBytes {
		live = live[:len(live)-ReservationEntryBytes]
	}
	var e [ReservationEntryBytes]byte
	next = withReserved(next, live+string(appendReservation(e[:0], id, cost)), p)
	reply.HoldAtMs = id
	return next, reply, uncommitted, true
}

// settle is CheckRequest of a settle of the reservation at (0: none) with
// the actual usage on st, whose live reservations are live.
func settle(r *rules, st State, live string, serverNowMs, now int64, p *limiter.Policy, at, actual int64) (next State, reply, uncommitted Reply, write bool) {
	_, _, idle, _ := checkAt(r, st, serverNowMs, now, p, 0, false)
	i := -1
	if at != 0 {
		if i = findReservation(live, at); i < 0 {
			return st, idle, idle, false
		}
	}
	if i < 0 && actual == 0 {
		return st, idle, idle, false
	}
	rest, excess := live, actual
	if i >= 0 {
		var amount int64
		rest, amount = removeReservation(live, i)
		excess = actual - amount
	}
	if excess > 0 {
		next, reply, uncommitted, write = checkAt(r, st, serverNowMs, now, p, excess, true)
		if !write {
			if i < 0 {
				return st, reply, uncommitted, false
			}
			// The state is at its ceiling: nothing more to record, but
			// the reservation goes.
			next = st
			next.LastObservedMs = max(st.LastObservedMs, now)
		}
		return withReserved(next, rest, p), reply, uncommitted, true
	}
	next = st
	if excess < 0 {
		next = r.refund(st, now, p, -excess, at-p.Reserve().TTL.Milliseconds())
	}
	next.LastObservedMs = max(st.LastObservedMs, now)
	next = withReserved(next, rest, p)
	_, _, reply, _ = checkAt(r, next, serverNowMs, now, p, 0, false)
	return next, reply, idle, true
}

// withReserved is st holding the reservations res, expiring no sooner
// than the last of them plus the cleanup grace.
func withReserved(st State, res string, p *limiter.Policy) State {
	st.Reserved = res
	if n := len(res) / ReservationEntryBytes; n > 0 {
		last, _ := reservationAt(res, n-1)
		st.ExpiresAtMs = max(st.ExpiresAtMs, last+p.CleanupGraceMillis())
	}
	return st
}

// sameWindow reports whether the times a and b are in one window of a
// window algorithm (fixed window, calendar period, sliding window): a
// refund at one of them gives back what was taken at the other. Always
// true for token bucket and GCRA.
func sameWindow(p *limiter.Policy, a, b int64) bool {
	switch p.Algorithm() {
	case limiter.FixedWindow:
		wa, _ := WindowAt(p, a)
		wb, _ := WindowAt(p, b)
		return wa == wb
	case limiter.SlidingWindow:
		return a/p.WindowMillis() == b/p.WindowMillis()
	}
	return true
}

// appendReservation appends a reservation of amount units whose identity
// is id to a packed State.Reserved.
func appendReservation(dst []byte, id, amount int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(id)))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(amount)))
}

// reservationFloats returns reservation i of res as stored.
func reservationFloats(res string, i int) (id, amount float64) {
	b := res[i*ReservationEntryBytes : (i+1)*ReservationEntryBytes]
	return math.Float64frombits(be64(b[:8])), math.Float64frombits(be64(b[8:]))
}

// be64 is the big-endian uint64 of the 8 bytes of b (no copy to a slice).
func be64(b string) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// reservationAt returns reservation i of res (validReserved has checked it).
func reservationAt(res string, i int) (id, amount int64) {
	f, a := reservationFloats(res, i)
	return int64(f), int64(a)
}

// validReserved: only a reserving policy's state holds reservations: whole
// entries, at most MaxReservations, identities integral in [1, 2^53-1]
// and ascending, amounts integral in [1, MaxCost], but the last, which
// may be 0 (a settled identity kept).
func validReserved(st State, p *limiter.Policy) bool {
	res := st.Reserved
	if !p.Reserve().On() {
		return res == ""
	}
	n := len(res) / ReservationEntryBytes
	if len(res)%ReservationEntryBytes != 0 || n > limiter.MaxReservations {
		return false
	}
	prev := 0.0
	for i := range n {
		id, amount := reservationFloats(res, i)
		least := 1.0
		if i == n-1 {
			least = 0
		}
		if !(id > prev && id <= float64(limiter.MaxSafeInteger)) || id != math.Trunc(id) ||
			!(amount >= least && amount <= float64(p.MaxCost())) || amount != math.Trunc(amount) {
			return false
		}
		prev = id
	}
	return true
}

// pruneReserved drops the reservations of res whose identity is at or
// before now, and counts the ones it dropped unsettled.
func pruneReserved(res string, now int64) (live string, expired int64) {
	for len(res) > 0 {
		id, amount := reservationAt(res, 0)
		if id > now {
			break
		}
		if amount > 0 {
			expired++
		}
		res = res[ReservationEntryBytes:]
	}
	return res, expired
}

// reservationsHeld counts the reservations of res, a settled identity
// kept not included.
func reservationsHeld(res string) int {
	n := len(res) / ReservationEntryBytes
	if n > 0 {
		if _, amount := reservationAt(res, n-1); amount == 0 {
			n--
		}
	}
	return n
}

// findReservation returns the index of the reservation of res whose
// identity is id, -1 when none is held.
func findReservation(res string, id int64) int {
	for i := range len(res) / ReservationEntryBytes {
		if t, amount := reservationAt(res, i); t == id && amount > 0 {
			return i
		} else if t >= id {
			break
		}
	}
	return -1
}

// removeReservation removes reservation i from res and returns its amount;
// the last one leaves its identity, settled (amount 0).
func removeReservation(res string, i int) (rest string, amount int64) {
	_, amount = reservationAt(res, i)
	from, to := i*ReservationEntryBytes, (i+1)*ReservationEntryBytes
	if to == len(res) {
		return res[:from+8] + string(binary.BigEndian.AppendUint64(nil, math.Float64bits(0))), amount
	}
	return res[:from] + res[to:], amount
}
