package lua

import (
	_ "embed"
	"strconv"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

//go:embed lease-v2.lua
var leaseV2 string

// Lease returns lease-v2.lua, the program of concurrency limits: one
// operation (algorithm.Lease) on one lease set. It is not one of Programs,
// the rate programs.
func Lease() program { return program{Name: "lease-v2.lua", Source: leaseV2} }

// LeaseArgs returns the ARGV of lease-v2.lua for request r (of a
// concurrency policy): the operation, whether a take consumes, the limit,
// the lease TTL, the cost, the cleanup grace, the identity of the leases
// a release or a return gives back (Request.LeaseAt) and deadlineMs, the
// caller's deadline in Redis's clock (0: none).
func LeaseArgs(r *limiter.Request, deadlineMs int64) []string {
	consumes := "0"
	if r.EffectiveRole().Consumes() {
		consumes = "1"
	}
	p := r.Policy
	return []string{leaseOpCodes[r.Lease], consumes, strconv.FormatInt(p.Limit(), 10),
		strconv.FormatInt(p.LeaseTTLMillis(), 10), strconv.FormatInt(r.Cost, 10), strconv.FormatInt(p.CleanupGraceMillis(), 10),
		strconv.FormatInt(r.LeaseAt, 10), strconv.FormatInt(deadlineMs, 10)}
}

// replyFields is the number of integers of a reply of lease-v2.lua:
// status, serverNowMillis, effectiveNowMillis, limit, remaining,
// retryAfterMillis, resetAtMillis.
const replyFields = 7

var fieldNames = [replyFields]string{"status", "serverNowMillis", "effectiveNowMillis", "limit", "remaining", "retryAfterMillis", "resetAtMillis"}

// ParseLeaseReply validates a reply of lease-v2.lua for policy p: exactly
// seven integers in [0, 2^53-1], status ALLOWED, DENIED,
// STATE_INCOMPATIBLE or INVALID, consistent with itself and with p as
// ParseBatchReplyV2 requires of a key's reply (check), with the effective
// now equal to the server's. A run past the caller's deadline, { 0,
// serverNowMillis }, is an *ExpiredError (errors.Is ErrExpired): nothing
// changed. Anything else is an error matching ErrMalformedReply.
func ParseLeaseReply(p *limiter.Policy, values []Value) (algorithm.Reply, error) {
	if len(values) == 2 && values[0].IsInt && values[0].Int == 0 {
		if v := values[1]; v.IsInt && v.Int >= 0 && v.Int <= limiter.MaxSafeInteger {
			return algorithm.Reply{}, &ExpiredError{ServerNowMs: v.Int}
		}
		return algorithm.Reply{}, malformed("lease reply past its deadline with TIME %+v", values[1])
	}
	if len(values) != replyFields {
		return algorithm.Reply{}, malformed("lease reply of %d values, want %d", len(values), replyFields)
	}
	var num [replyFields]int64
	for i, v := range values {
		if !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
			return algorithm.Reply{}, malformed("lease reply field %s: %+v", fieldNames[i], v)
		}
		num[i] = v.Int
	}
	r := algorithm.Reply{Status: statusOf(num[0]), ServerNowMs: num[1], EffectiveNowMs: num[2], Limit: num[3],
		Remaining: num[4], RetryAfterMs: num[5], ResetAtMs: num[6]}
	switch r.Status {
	case algorithm.StatusAllowed, algorithm.StatusDenied, algorithm.StatusStateIncompatible, algorithm.StatusInvalid:
	default:
		return algorithm.Reply{}, malformed("lease reply status %d", num[0])
	}
	if r.EffectiveNowMs != r.ServerNowMs {
		return algorithm.Reply{}, malformed("lease reply effectiveNowMillis %d is not serverNowMillis %d", r.EffectiveNowMs, r.ServerNowMs)
	}
	if err := check(p, r); err != nil {
		return algorithm.Reply{}, err
	}
	return r, nil
}
