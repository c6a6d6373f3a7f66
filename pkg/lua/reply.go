package lua

import (
	"errors"
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// ReplyFields is the number of fields of one key's reply of
// rate-batch-v1.lua: status, serverNowMillis, effectiveNowMillis, limit,
// remaining, retryAfterMillis, resetAtMillis.
const ReplyFields = 7

// ErrMalformedReply is matched (errors.Is) by every ParseBatchReply error.
var ErrMalformedReply = errors.New("lua: malformed program reply")

type replyError struct{ msg string }

func (e *replyError) Error() string        { return "lua: malformed program reply: " + e.msg }
func (e *replyError) Is(target error) bool { return target == ErrMalformedReply }

func malformed(format string, args ...any) error {
	return &replyError{msg: fmt.Sprintf(format, args...)}
}

var fieldNames = [ReplyFields]string{"status", "serverNowMillis", "effectiveNowMillis", "limit", "remaining", "retryAfterMillis", "resetAtMillis"}

// check is the consistency of one key's reply: effectiveNow >= serverNow,
// by at most the policy's clock regression; ALLOWED has retryAfter 0,
// DENIED at least 1, both remaining <= limit and resetAt >= effectiveNow;
// CLOCK_UNSAFE and STATE_INCOMPATIBLE carry (serverNow, serverNow, limit, 0,
// 0, 0) and INVALID (serverNow, serverNow, 0, 0, 0, 0); the limit is the
// policy's.
func check(p *limiter.Policy, r limiter.Reply) error {
	switch r.Status {
	case limiter.StatusAllowed, limiter.StatusDenied, limiter.StatusBlocked:
		if r.Status == limiter.StatusBlocked && (!p.Penalty().On() || r.Remaining != 0 || r.RetryAfterMs < 1) {
			return malformed("BLOCKED with remaining %d, retryAfterMillis %d, for a policy with penalty %t", r.Remaining, r.RetryAfterMs, p.Penalty().On())
		}
		if r.EffectiveNowMs < r.ServerNowMs {
			return malformed("effectiveNowMillis %d before serverNowMillis %d", r.EffectiveNowMs, r.ServerNowMs)
		}
		if r.EffectiveNowMs-r.ServerNowMs > p.MaxClockRegressionMillis() {
			return malformed("clamped %dms, more than the policy's max clock regression", r.EffectiveNowMs-r.ServerNowMs)
		}
		if r.Remaining > r.Limit {
			return malformed("remaining %d above limit %d", r.Remaining, r.Limit)
		}
		if r.Status == limiter.StatusAllowed && r.RetryAfterMs != 0 {
			return malformed("ALLOWED with retryAfterMillis %d", r.RetryAfterMs)
		}
		if r.Status == limiter.StatusDenied && r.RetryAfterMs < 1 {
			return malformed("DENIED with retryAfterMillis 0")
		}
		if r.ResetAtMs < r.EffectiveNowMs {
			return malformed("resetAtMillis %d before effectiveNowMillis %d", r.ResetAtMs, r.EffectiveNowMs)
		}
	case limiter.StatusClockUnsafe, limiter.StatusStateIncompatible, limiter.StatusInvalid:
		if r.EffectiveNowMs != r.ServerNowMs || r.Remaining != 0 || r.RetryAfterMs != 0 || r.ResetAtMs != 0 {
			return malformed("%s with non-zero fields", r.Status)
		}
		if r.Status == limiter.StatusInvalid {
			if r.Limit != 0 {
				return malformed("INVALID with limit %d", r.Limit)
			}
			return nil
		}
	}
	if r.Limit != p.Limit() {
		return malformed("limit %d, the policy's is %d", r.Limit, p.Limit())
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// Value is one element of a batch reply as the client decoded it: a bulk
// string (IsInt false) or an integer.
type Value struct {
	Str   string
	Int   int64
	IsInt bool
}

// ExpiredFlag is the first value of a request's reply of
// rate-batch-v1.lua when the program ran past the deadline it was given:
// { 2, serverNowMillis }.
const ExpiredFlag = 2

// FailedFlag is the first value of a request's reply of rate-batch-v1.lua
// when its evaluation raised an error: { 3, error text }. The other
// requests of the group are unaffected.
const FailedFlag = 3

// ErrRequestFailed is matched (errors.Is) by the *FailedError
// ParseBatchReply returns for a request whose evaluation raised.
var ErrRequestFailed = errors.New("lua: the program failed for this request")

// FailedError is a request whose evaluation raised an error in the
// program; its other requests were evaluated.
type FailedError struct {
	// Msg is the error's text as the program caught it (a Redis error
	// reply's text, such as "OOM ...", when a command failed).
	Msg string
}

func (e *FailedError) Error() string {
	msg := e.Msg
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return fmt.Sprintf("%v: %s", ErrRequestFailed, msg)
}

// Is matches ErrRequestFailed.
func (e *FailedError) Is(target error) bool { return target == ErrRequestFailed }

// ErrExpired is matched (errors.Is) by the *ExpiredError ParseBatchReply
// returns for a program that ran past its deadline: nothing was evaluated
// or written.
var ErrExpired = errors.New("lua: program ran past the call's deadline, nothing committed")

// ExpiredError is a program run that refused to commit because Redis's
// clock was past the deadline it was given.
type ExpiredError struct {
	// ServerNowMs is the TIME the program read.
	ServerNowMs int64
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("%v (Redis TIME %d ms)", ErrExpired, e.ServerNowMs)
}

// Is matches ErrExpired.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// ParseBatchReply validates one request's reply of rate-batch-v1.lua (one
// element of the group's reply) for the given policies (one per key, in
// order) and writes one reply per key into out.
// The reply must be exactly 1 + 7N values: the committed flag (integer 0 or
// 1), then per key a known status (bulk string) and six integers in
// [0, 2^53-1] consistent with each other and with the key's policy (see
// check), every key with the same serverNowMillis (one TIME); or exactly
// the two integers { ExpiredFlag, serverNowMillis in [0, 2^53-1] }, which
// is an *ExpiredError (nothing committed, out untouched); or { FailedFlag,
// text }, a *FailedError. Anything else is an error matching
// ErrMalformedReply, for the whole request.
func ParseBatchReply(policies []*limiter.Policy, values []Value, out []limiter.Reply) (committed bool, err error) {
	n := len(policies)
	if err := notDecided(values); err != nil {
		return false, err
	}
	if len(values) != 1+ReplyFields*n {
		return false, malformed("%d values for %d keys, want %d", len(values), n, 1+ReplyFields*n)
	}
	if v := values[0]; !v.IsInt || v.Int < 0 || v.Int > 1 {
		return false, malformed("committed flag %+v", v)
	}
	committed = values[0].Int == 1
	for k := range n {
		f := values[1+k*ReplyFields : 1+(k+1)*ReplyFields]
		if f[0].IsInt {
			return false, malformed("key %d: status is an integer", k+1)
		}
		st, ok := parseStatus(f[0].Str)
		if !ok {
			return false, malformed("key %d: unknown status %q", k+1, truncate(f[0].Str))
		}
		var num [ReplyFields]int64
		for i := 1; i < ReplyFields; i++ {
			if !f[i].IsInt || f[i].Int < 0 || f[i].Int > limiter.MaxSafeInteger {
				return false, malformed("key %d: %s is not an integer in [0, 2^53-1]: %+v", k+1, fieldNames[i], f[i])
			}
			num[i] = f[i].Int
		}
		r := limiter.Reply{Status: st, ServerNowMs: num[1], EffectiveNowMs: num[2], Limit: num[3], Remaining: num[4], RetryAfterMs: num[5], ResetAtMs: num[6]}
		if err := check(policies[k], r); err != nil {
			return false, fmt.Errorf("key %d: %w", k+1, err)
		}
		if k > 0 && r.ServerNowMs != out[0].ServerNowMs {
			return false, malformed("key %d: serverNowMillis %d, key 1 read %d (TIME is read once)", k+1, r.ServerNowMs, out[0].ServerNowMs)
		}
		out[k] = r
	}
	return committed, nil
}

// statusWire is the first field of a per-key reply as the programs write it,
// by limiter.Status. The names are those limiter.Status.String gives (the
// names docs/algorithms.md uses), so that a reply and an error read alike.
var statusWire = [...]string{
	limiter.StatusAllowed:           "ALLOWED",
	limiter.StatusDenied:            "DENIED",
	limiter.StatusClockUnsafe:       "CLOCK_UNSAFE",
	limiter.StatusStateIncompatible: "STATE_INCOMPATIBLE",
	limiter.StatusInvalid:           "INVALID",
	limiter.StatusBlocked:           "BLOCKED",
}

// parseStatus reads the status field of a program's reply; ok is false for
// anything but the six statuses.
func parseStatus(s string) (limiter.Status, bool) {
	for st, w := range statusWire {
		if w != "" && w == s {
			return limiter.Status(st), true
		}
	}
	return 0, false
}

// notDecided is the error of a reply that decided nothing, the same in
// every version of the rate program: { ExpiredFlag, serverNowMillis }, an
// *ExpiredError, or { FailedFlag, text }, a *FailedError. It is nil for
// any other reply.
func notDecided(values []Value) error {
	if len(values) != 2 || !values[0].IsInt {
		return nil
	}
	switch {
	case values[0].Int == ExpiredFlag:
		if v := values[1]; !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
			return malformed("expired reply with serverNowMillis %+v", v)
		}
		return &ExpiredError{ServerNowMs: values[1].Int}
	case values[0].Int == FailedFlag && !values[1].IsInt:
		return &FailedError{Msg: values[1].Str}
	}
	return nil
}
