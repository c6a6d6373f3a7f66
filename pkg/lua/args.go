package lua

import (
	"encoding/binary"
	"math"
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// This file encodes the arguments of the rate programs: a key's packed
// numbers, with the penalty and calendar extensions (rate-batch-v2.lua's
// and rate-refund-v2.lua's one ARGV field per key), the group field of the
// batch program, and the refund program's effective times.

// batchPacked is the length of the packed numbers of one key:
// struct.pack('>BBddddddd'), without extensions (see BatchPackedLen).
const batchPacked = 2 + 7*8

// The bits of the flags byte of a key's packed numbers (AppendBatchPacked).
// The programs read them with bit.band.
const (
	// flagRoleMask holds the key's role (roleCodes: 0 ordinary, 1
	// shadow, 2 quota, 3 check, 4 probe, 5 quota probe) in bits 0-2.
	flagRoleMask = 7
	// FlagFailOpen: the key's failure takes no part in the batch rule
	// (limiter.Policy.AbstainsOnFailure: the policy fails open), as
	// limiter.Commits says; the failure mode's answer itself is
	// pkg/limiter/failover's.
	flagFailOpen = 8
	// flagPenalty: the penalty extension follows the packed numbers
	// (limiter.Penalty, BatchPackedLen).
	flagPenalty = 16
	// flagCalendar: the calendar extension (calendarPacked bytes) follows
	// the packed numbers, after the penalty extension when both are set.
	flagCalendar = 32
	// flagCharge: the key's policy records a denied cost
	// (limiter.ChargeAlways), up to limiter.Policy.Ceiling.
	flagCharge = 64
	// flagReserve: the key's policy reserves (limiter.Reserve): the
	// reservation extension (reservePacked bytes) follows the penalty
	// extension's place, before the calendar extension.
	flagReserve = 128
)

// reservePacked is the length of the reservation extension of a key of a
// reserving policy: struct.pack('>ddddd') of the operation (reserveOp or
// settleOp), the TTL ms, the settle's identity (limiter.Request.LeaseAt; 0
// for a reserve), the policy's max cost and, for a calendar window's
// settle of a reservation, the start of the period holding the
// reservation's time (its identity minus the TTL), else 0
// (fragments/reserve.lua).
const reservePacked = 5 * 8

// The operations of the reservation extension.
const (
	reserveOp = 1
	settleOp  = 2
)

// penaltyPacked is the length of the penalty extension that follows the
// packed numbers of a key whose policy has a penalty box:
// struct.pack('>ddd'), duration, max duration and decay in ms
// (fragments/penalty.lua).
const penaltyPacked = 3 * 8

// calendarPacked is the length of the calendar extension of a key's packed
// numbers: struct.pack('>dddd'), the boundaries b0 < b1 < b2 < b3 (Unix
// ms) of three consecutive calendar periods [b0, b1), [b1, b2), [b2, b3):
// the one before the period holding the sender's estimate of Redis's
// clock, that period, and the one after it (calendar.Calendar.Neighbours).
const calendarPacked = 4 * 8

// BatchPackedLen is the length AppendBatchPacked appends for a key of p:
// batchPacked, plus penaltyPacked with a penalty box, plus reservePacked
// for a reserving policy, plus calendarPacked for a calendar window.
func BatchPackedLen(p *limiter.Policy) int {
	n := batchPacked
	if p.Penalty().On() {
		n += penaltyPacked
	}
	if p.Reserve().On() {
		n += reservePacked
	}
	if p.Calendar() != nil {
		n += calendarPacked
	}
	return n
}

// AppendBatchPacked appends the argument of one key of rate-batch-v2.lua
// to dst, BatchPackedLen bytes: the numbers packed big-endian as
// struct.pack('>BBddddddd'): algorithm (algorithmCodes), flags (the role
// (roleCodes), FlagFailOpen when the key's failure takes no part in the
// batch rule (limiter.Policy.AbstainsOnFailure), flagPenalty with a
// penalty box, flagCalendar for a calendar window, flagCharge when the
// policy charges always), revision, limit, the two algorithm arguments
// (algorithmArgs), cleanup grace ms, max clock regression ms, cost; then
// the extensions, in this order: the penalty box's (penaltyPacked) and a
// calendar window's (calendarPacked: the periods around nowMs, the
// caller's estimate of Redis's clock in Unix ms, which nothing else
// reads). Every number is an integer below 2^53, which a float64 holds
// exactly. role is the mode the key plays in this program
// (limiter.Request.Role, or another one when the caller splits a batch).
// Callers may pool dst. A key of a reserving policy is a reserve of
// cost (AppendRequestPacked).
func AppendBatchPacked(dst []byte, p *limiter.Policy, cost int64, role limiter.Role, nowMs int64) []byte {
	return AppendRequestPacked(dst, p, cost, role, limiter.LeaseTake, 0, nowMs)
}

// AppendRequestPacked is AppendBatchPacked of a request whose lease
// operation is lease and its LeaseAt at: on a reserving policy
// (limiter.Request.Reserves), flagReserve and the reservation extension,
// after the penalty extension's place: a take reserves (its cost the
// policy's estimate when it has one), a release settles the reservation
// at (0: none) with the usage cost.
func AppendRequestPacked(dst []byte, p *limiter.Policy, cost int64, role limiter.Role, lease limiter.LeaseOp, at, nowMs int64) []byte {
	n := BatchPackedLen(p)
	dst = slices.Grow(dst, n)
	fixed := batchPacked
	if p.Penalty().On() {
		fixed += penaltyPacked
	}
	res := p.Reserve()
	if res.On() {
		fixed += reservePacked
		if lease == limiter.LeaseTake && res.Estimate != 0 {
			cost = res.Estimate
		}
	}
	b := dst[len(dst) : len(dst)+fixed]
	b[0] = algorithmCodes[p.Algorithm()]
	b[1] = roleCodes[role] & flagRoleMask
	if p.AbstainsOnFailure() {
		b[1] |= flagFailOpen
	}
	if p.ChargeAlways() {
		b[1] |= flagCharge
	}
	arg1, arg2 := algorithmArgs(p)
	for i, v := range [7]int64{int64(p.Revision()), p.Limit(), arg1, arg2, p.CleanupGraceMillis(), p.MaxClockRegressionMillis(), cost} {
		binary.BigEndian.PutUint64(b[2+8*i:], math.Float64bits(float64(v)))
	}
	if p.Penalty().On() {
		packPenalty(b, p)
	}
	if res.On() {
		packReserve(b, p, lease, at)
	}
	return appendCalendar(dst[:len(dst)+fixed], b, p, nowMs)
}

// packReserve sets the reservation flag in b, a key's packed numbers
// (batchPacked + reservePacked bytes: a reserving policy has no penalty
// box), and writes p's reservation extension for lease at at.
func packReserve(b []byte, p *limiter.Policy, lease limiter.LeaseOp, at int64) {
	b[1] |= flagReserve
	ttl := p.Reserve().TTL.Milliseconds()
	op, start := int64(reserveOp), int64(0)
	if lease == limiter.LeaseRelease {
		op = settleOp
		if c := p.Calendar(); c != nil && at != 0 {
			start, _ = c.Period(max(0, at-ttl))
		}
	} else {
		at = 0
	}
	for i, v := range [5]int64{op, ttl, at, p.MaxCost(), start} {
		binary.BigEndian.PutUint64(b[batchPacked+8*i:], math.Float64bits(float64(v)))
	}
}

// packPenalty sets the penalty flag in b, a key's packed numbers of
// batchPacked + penaltyPacked bytes, and writes p's penalty extension.
func packPenalty(b []byte, p *limiter.Policy) {
	b[1] |= flagPenalty
	pn := p.Penalty()
	for i, v := range [3]time.Duration{pn.Duration, pn.MaxDuration, pn.Decay} {
		v := v.Milliseconds()
		binary.BigEndian.PutUint64(b[batchPacked+8*i:], math.Float64bits(float64(v)))
	}
}

// appendCalendar completes the packed numbers of p in dst, whose fixed
// part (with the penalty extension, if any) is fixed: for a calendar window
// it sets fixed's calendar flag and appends the extension around nowMs
// (dst has room for it: BatchPackedLen).
func appendCalendar(dst, fixed []byte, p *limiter.Policy, nowMs int64) []byte {
	c := p.Calendar()
	if c == nil {
		return dst
	}
	fixed[1] |= flagCalendar
	for _, v := range c.Neighbours(nowMs) {
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(v)))
	}
	return dst
}

// groupEntry is the length of one request's entry in the last ARGV field
// of rate-batch-v2.lua: struct.pack('>Hd').
const groupEntry = 2 + 8

// MaxRequestKeys is the most keys one request of a group may have (its
// count is a 16-bit field).
const MaxRequestKeys = 1<<16 - 1

// AppendGroupEntry appends one request's entry of the last ARGV field of
// rate-batch-v2.lua to dst: its number of keys (1..MaxRequestKeys; its keys
// and their ARGV fields follow those of the requests before it) and its
// deadline in ms of Redis's clock (TIME), in [1, 2^53-1], or 0 for none. A
// request whose deadline the program's TIME is past is not evaluated,
// commits nothing and replies ExpiredFlag (see ParseBatchReplyV2).
func AppendGroupEntry(dst []byte, keys int, deadlineMs int64) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(keys))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(deadlineMs)))
}

// AppendRefundPacked appends the argument of one key of rate-refund-v2.lua
// to dst: the packed numbers of the batch that took cost
// (AppendBatchPacked), a calendar window's periods around effectiveNowMs,
// the effectiveNowMillis the batch replied for the key.
func AppendRefundPacked(dst []byte, p *limiter.Policy, cost, effectiveNowMs int64) []byte {
	return AppendBatchPacked(dst, p, cost, limiter.RoleOrdinary, effectiveNowMs)
}

// AppendRefundTime appends one key's entry of the last ARGV field of
// rate-refund-v2.lua to dst: struct.pack('>d') of the effectiveNowMillis
// the batch replied for it.
func AppendRefundTime(dst []byte, effectiveNowMs int64) []byte {
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(effectiveNowMs)))
}
