package lua

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// BatchArgs is the number of ARGV fields per key of rate-batch-v1.lua.
const BatchArgs = 2

// BatchPacked is the length of the packed numbers of one key:
// struct.pack('>BBddddddd'), without extensions (see BatchPackedLen).
const BatchPacked = 2 + 7*8

// AppendBatchArgs appends the two ARGV fields of one key of
// rate-batch-v1.lua to dst: the policy ID, and the numbers packed
// big-endian as struct.pack('>BBddddddd'): algorithm (limiter.Algorithm),
// flags (the role, FlagFailOpen when the key's failure takes no part in the
// batch rule (limiter.Policy.AbstainsOnFailure), FlagPenalty
// with a penalty box, FlagCalendar for a calendar window), revision, limit,
// the two algorithm arguments (limiter.Policy.AlgorithmArgs), cleanup grace
// ms, max clock regression ms, cost; then the extensions, in this order:
// the penalty box's (PenaltyPacked) and a calendar window's
// (CalendarPacked, computed at the wall clock's now: AppendBatchArgsAt
// takes the time). Every number is an integer below 2^53, which a float64
// holds exactly. role is the mode the key plays in this program
// (limiter.Request.Role, or another one when the caller splits a batch).
func AppendBatchArgs(dst []string, p *limiter.Policy, cost int64, role limiter.Role) []string {
	return AppendBatchArgsAt(dst, p, cost, role, wallNow(p))
}

// AppendBatchPacked appends the packed numbers of one key of
// rate-batch-v1.lua (the second ARGV field of AppendBatchArgs,
// BatchPackedLen bytes: the penalty extension, then the calendar extension,
// follow when the policy has them) to dst, for callers that pool their
// argument buffers. A calendar window's extension is computed at the wall
// clock's now.
func AppendBatchPacked(dst []byte, p *limiter.Policy, cost int64, role limiter.Role) []byte {
	return AppendBatchPackedAt(dst, p, cost, role, wallNow(p))
}

// AppendBatchPackedAt is AppendBatchPacked with a calendar window's
// periods around nowMs, the caller's estimate of Redis's clock (Unix ms).
func AppendBatchPackedAt(dst []byte, p *limiter.Policy, cost int64, role limiter.Role, nowMs int64) []byte {
	n := BatchPackedLen(p)
	dst = slices.Grow(dst, n)
	fixed := BatchPacked
	if p.Penalty().On() {
		fixed += PenaltyPacked
	}
	b := dst[len(dst) : len(dst)+fixed]
	b[0] = byte(p.Algorithm())
	b[1] = byte(role) & FlagRoleMask
	if p.AbstainsOnFailure() {
		b[1] |= FlagFailOpen
	}
	arg1, arg2 := p.AlgorithmArgs()
	for i, v := range [7]int64{int64(p.Revision()), p.Limit(), arg1, arg2, p.CleanupGraceMillis(), p.MaxClockRegressionMillis(), cost} {
		binary.BigEndian.PutUint64(b[2+8*i:], math.Float64bits(float64(v)))
	}
	if fixed > BatchPacked {
		packPenalty(b, p)
	}
	return appendCalendar(dst[:len(dst)+fixed], b, p, nowMs)
}
