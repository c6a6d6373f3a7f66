package lua

import (
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// ReplyFieldsV2 is the number of integers of one key's reply of
// rate-batch-v2.lua: code, remaining, retryAfterMillis, resetAtMillis.
const ReplyFieldsV2 = 4

// StatusCodes is the number of the code of a key's reply of
// rate-batch-v2.lua that is its status (limiter.Status); the rest, divided
// by StatusCodes, is how far its effective now is ahead of serverNow.
const StatusCodes = 8

var fieldNamesV2 = [ReplyFieldsV2]string{"code", "remaining", "retryAfterMillis", "resetAtMillis"}

// ParseBatchReplyV2 validates one request's reply of rate-batch-v2.lua (one
// element of the group's reply) for the given policies (one per key, in
// order) and writes one reply per key into out. The reply must be exactly
// 2 + 4N integers: the committed flag (0 or 1), serverNowMillis, then per
// key its code (a status of limiter.Status plus StatusCodes times the ms
// its effective now is ahead of serverNowMillis), remaining (for BLOCKED,
// whose remaining is 0: the ms until its block ends, limiter.Reply's
// BlockLeftMs, in [1, retryAfterMillis]), retryAfterMillis and
// resetAtMillis, every one in [0, 2^53-1]; each key's
// reply, with the policy's limit (0 for INVALID), must be consistent with
// itself and with the policy as ParseBatchReply requires. Or exactly the
// two integers { ExpiredFlag, serverNowMillis in [0, 2^53-1] }, an
// *ExpiredError (nothing committed, out untouched); or { FailedFlag, text
// }, a *FailedError. Anything else is an error matching ErrMalformedReply,
// for the whole request.
func ParseBatchReplyV2(policies []*limiter.Policy, values []Value, out []limiter.Reply) (committed bool, err error) {
	n := len(policies)
	if err := notDecided(values); err != nil {
		return false, err
	}
	if len(values) != 2+ReplyFieldsV2*n {
		return false, malformed("%d values for %d keys, want %d", len(values), n, 2+ReplyFieldsV2*n)
	}
	if v := values[0]; !v.IsInt || v.Int < 0 || v.Int > 1 {
		return false, malformed("committed flag %+v", v)
	}
	if v := values[1]; !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
		return false, malformed("serverNowMillis %+v", v)
	}
	committed, serverNow := values[0].Int == 1, values[1].Int
	for k := range n {
		f := values[2+k*ReplyFieldsV2 : 2+(k+1)*ReplyFieldsV2]
		var num [ReplyFieldsV2]int64
		for i, v := range f {
			if !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
				return false, malformed("key %d: %s is not an integer in [0, 2^53-1]: %+v", k+1, fieldNamesV2[i], v)
			}
			num[i] = v.Int
		}
		st := limiter.Status(num[0] % StatusCodes)
		if st < limiter.StatusAllowed || st > limiter.StatusBlocked {
			return false, malformed("key %d: unknown status %d", k+1, st)
		}
		clamp := num[0] / StatusCodes
		if clamp > limiter.MaxSafeInteger-serverNow {
			return false, malformed("key %d: effective now beyond 2^53-1", k+1)
		}
		r := limiter.Reply{Status: st, ServerNowMs: serverNow, EffectiveNowMs: serverNow + clamp,
			Limit: policies[k].Limit(), Remaining: num[1], RetryAfterMs: num[2], ResetAtMs: num[3]}
		switch st {
		case limiter.StatusInvalid:
			r.Limit = 0
		case limiter.StatusBlocked:
			// A blocked key has nothing remaining: the field holds the
			// ms until its block ends, at most its retry.
			r.Remaining, r.BlockLeftMs = 0, num[1]
			if r.BlockLeftMs < 1 || r.BlockLeftMs > r.RetryAfterMs {
				return false, malformed("key %d: BLOCKED with a block of %dms and a retry of %dms", k+1, r.BlockLeftMs, r.RetryAfterMs)
			}
		}
		if err := check(policies[k], r); err != nil {
			return false, fmt.Errorf("key %d: %w", k+1, err)
		}
		out[k] = r
	}
	return committed, nil
}

// AppendReplyV2 appends the values rate-batch-v2.lua replies for one
// request that was evaluated (committed or not) to dst: the encoding
// ParseBatchReplyV2 reads; replies share one ServerNowMs.
func AppendReplyV2(dst []Value, committed bool, replies []limiter.Reply) []Value {
	flag := int64(0)
	if committed {
		flag = 1
	}
	serverNow := int64(0)
	if len(replies) > 0 {
		serverNow = replies[0].ServerNowMs
	}
	dst = append(dst, Value{Int: flag, IsInt: true}, Value{Int: serverNow, IsInt: true})
	for _, r := range replies {
		code := int64(r.Status) + StatusCodes*(r.EffectiveNowMs-r.ServerNowMs)
		remaining := r.Remaining
		if r.Status == limiter.StatusBlocked {
			remaining = r.BlockLeftMs
		}
		for _, v := range []int64{code, remaining, r.RetryAfterMs, r.ResetAtMs} {
			dst = append(dst, Value{Int: v, IsInt: true})
		}
	}
	return dst
}
