package lua

import (
	"errors"
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// ErrMalformedReply is matched (errors.Is) by every error of a reply that
// is not what the program writes (ParseBatchReplyV2, ParseLeaseReply).
var ErrMalformedReply = errors.New("lua: malformed program reply")

type replyError struct{ msg string }

func (e *replyError) Error() string        { return "lua: malformed program reply: " + e.msg }
func (e *replyError) Is(target error) bool { return target == ErrMalformedReply }

func malformed(format string, args ...any) error {
	return &replyError{msg: fmt.Sprintf(format, args...)}
}

// check is the consistency of one key's reply: effectiveNow >= serverNow,
// by at most the policy's clock regression; ALLOWED has retryAfter 0,
// DENIED at least 1, both remaining <= limit and resetAt >= effectiveNow;
// CLOCK_UNSAFE and STATE_INCOMPATIBLE carry (serverNow, serverNow, limit, 0,
// 0, 0) and INVALID (serverNow, serverNow, 0, 0, 0, 0); the limit is the
// policy's.
func check(p *limiter.Policy, r algorithm.Reply) error {
	switch r.Status {
	case algorithm.StatusAllowed, algorithm.StatusDenied, algorithm.StatusBlocked:
		if r.Status == algorithm.StatusBlocked && (!p.Penalty().On() || r.Remaining != 0 || r.RetryAfterMs < 1) {
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
		if r.Status == algorithm.StatusAllowed && r.RetryAfterMs != 0 {
			return malformed("ALLOWED with retryAfterMillis %d", r.RetryAfterMs)
		}
		if r.Status == algorithm.StatusDenied && r.RetryAfterMs < 1 {
			return malformed("DENIED with retryAfterMillis 0")
		}
		if r.ResetAtMs < r.EffectiveNowMs {
			return malformed("resetAtMillis %d before effectiveNowMillis %d", r.ResetAtMs, r.EffectiveNowMs)
		}
	case algorithm.StatusClockUnsafe, algorithm.StatusStateIncompatible, algorithm.StatusInvalid:
		if r.EffectiveNowMs != r.ServerNowMs || r.Remaining != 0 || r.RetryAfterMs != 0 || r.ResetAtMs != 0 {
			return malformed("%s with non-zero fields", r.Status)
		}
		if r.Status == algorithm.StatusInvalid {
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

// Value is one element of a batch reply as the client decoded it: a bulk
// string (IsInt false) or an integer.
type Value struct {
	Str   string
	Int   int64
	IsInt bool
}

// expiredFlag is the first value of a request's reply of
// rate-batch-v2.lua when the program ran past the deadline it was given:
// { 2, serverNowMillis }.
const expiredFlag = 2

// failedFlag is the first value of a request's reply of rate-batch-v2.lua
// when its evaluation raised an error: { 3, error text }. The other
// requests of the group are unaffected.
const failedFlag = 3

// errRequestFailed starts the text of, and is matched (errors.Is) by, the
// *FailedError ParseBatchReplyV2 returns for a request whose evaluation
// raised; other packages match the type (errors.As).
var errRequestFailed = errors.New("lua: the program failed for this request")

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
	return fmt.Sprintf("%v: %s", errRequestFailed, msg)
}

// Is matches errRequestFailed.
func (e *FailedError) Is(target error) bool { return target == errRequestFailed }

// ErrExpired is matched (errors.Is) by the *ExpiredError ParseBatchReplyV2
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

// notDecided is the error of a reply that decided nothing, the same in
// every version of the rate program: { ExpiredFlag, serverNowMillis }, an
// *ExpiredError, or { FailedFlag, text }, a *FailedError. It is nil for
// any other reply.
func notDecided(values []Value) error {
	if len(values) != 2 || !values[0].IsInt {
		return nil
	}
	switch {
	case values[0].Int == expiredFlag:
		if v := values[1]; !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
			return malformed("expired reply with serverNowMillis %+v", v)
		}
		return &ExpiredError{ServerNowMs: values[1].Int}
	case values[0].Int == failedFlag && !values[1].IsInt:
		return &FailedError{Msg: values[1].Str}
	}
	return nil
}

// replyFieldsV2 is the number of integers of one key's reply of
// rate-batch-v2.lua: code, remaining, retryAfterMillis, resetAtMillis.
const replyFieldsV2 = 4

// statusMod: the code of a key's reply of rate-batch-v2.lua modulo
// statusMod is its status (statusCodes); the code divided by statusMod is
// how far its effective now is ahead of serverNow.
const statusMod = 8

var fieldNamesV2 = [replyFieldsV2]string{"code", "remaining", "retryAfterMillis", "resetAtMillis"}

// reserveFields is the number of a reserving policy's key's fields after
// every key's: its reservation's identity, the units held, the expired.
const reserveFields = 3

// ParseBatchReplyV2 validates one request's reply of rate-batch-v2.lua (one
// element of the group's reply) for the given policies (one per key, in
// order) and writes one reply per key into out. The reply must be exactly
// 2 + 4N integers: the committed flag (0 or 1), serverNowMillis, then per
// key its code (a status code, statusCodes, plus statusMod times the ms
// its effective now is ahead of serverNowMillis), remaining (for BLOCKED,
// whose remaining is 0: the ms until its block ends, algorithm.Reply's
// BlockLeftMs, in [1, retryAfterMillis]), retryAfterMillis and
// resetAtMillis, every one in [0, 2^53-1]; each key's
// reply, with the policy's limit (0 for INVALID), must be consistent with
// itself and with the policy (check). Then, for each key of a reserving
// policy (limiter.Reserve), in key order, the identity of the reservation
// it holds (algorithm.Reply's HoldAtMs): 0, or, for an ALLOWED key of a
// committed request, its effective now plus the TTL, pushed by at most
// limiter.MaxReservations ms; the units its subject's live reservations
// hold (ReservedUnits, at most MaxReservations times the policy's max
// cost); the reservations it dropped expired (Expired, at most
// MaxReservations). Or exactly the
// two integers { ExpiredFlag, serverNowMillis in [0, 2^53-1] }, an
// *ExpiredError (nothing committed, out untouched); or { FailedFlag, text
// }, a *FailedError. Anything else is an error matching ErrMalformedReply,
// for the whole request.
func ParseBatchReplyV2(policies []*limiter.Policy, values []Value, out []algorithm.Reply) (committed bool, err error) {
	n := len(policies)
	if err := notDecided(values); err != nil {
		return false, err
	}
	holds := 0
	for _, p := range policies {
		if p.Reserve().On() {
			holds++
		}
	}
	if want := 2 + replyFieldsV2*n + reserveFields*holds; len(values) != want {
		return false, malformed("%d values for %d keys, want %d", len(values), n, want)
	}
	if v := values[0]; !v.IsInt || v.Int < 0 || v.Int > 1 {
		return false, malformed("committed flag %+v", v)
	}
	if v := values[1]; !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
		return false, malformed("serverNowMillis %+v", v)
	}
	committed, serverNow := values[0].Int == 1, values[1].Int
	for k := range n {
		f := values[2+k*replyFieldsV2 : 2+(k+1)*replyFieldsV2]
		var num [replyFieldsV2]int64
		for i, v := range f {
			if !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
				return false, malformed("key %d: %s is not an integer in [0, 2^53-1]: %+v", k+1, fieldNamesV2[i], v)
			}
			num[i] = v.Int
		}
		st := statusOf(num[0] % statusMod)
		if st == 0 {
			return false, malformed("key %d: unknown status %d", k+1, num[0]%statusMod)
		}
		clamp := num[0] / statusMod
		if clamp > limiter.MaxSafeInteger-serverNow {
			return false, malformed("key %d: effective now beyond 2^53-1", k+1)
		}
		r := algorithm.Reply{Status: st, ServerNowMs: serverNow, EffectiveNowMs: serverNow + clamp,
			Limit: policies[k].Limit(), Remaining: num[1], RetryAfterMs: num[2], ResetAtMs: num[3]}
		switch st {
		case algorithm.StatusInvalid:
			r.Limit = 0
		case algorithm.StatusBlocked:
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
	h := 2 + replyFieldsV2*n
	for k, p := range policies {
		if !p.Reserve().On() {
			continue
		}
		v, held, expired := values[h], values[h+1], values[h+2]
		h += reserveFields
		if !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
			return false, malformed("key %d: the reservation's identity is not an integer in [0, 2^53-1]: %+v", k+1, v)
		}
		if !held.IsInt || held.Int < 0 || held.Int > limiter.MaxReservations*p.MaxCost() ||
			!expired.IsInt || expired.Int < 0 || expired.Int > limiter.MaxReservations {
			return false, malformed("key %d: reservations holding %+v units, %+v expired", k+1, held, expired)
		}
		out[k].ReservedUnits, out[k].Expired = held.Int, expired.Int
		if v.Int == 0 {
			continue
		}
		least := out[k].EffectiveNowMs + p.Reserve().TTL.Milliseconds()
		if !committed || out[k].Status != algorithm.StatusAllowed || v.Int < least || v.Int > least+limiter.MaxReservations {
			return false, malformed("key %d: a reservation at %d for a %s key (committed %t, effective now %d)", k+1, v.Int, out[k].Status, committed, out[k].EffectiveNowMs)
		}
		out[k].HoldAtMs = v.Int
	}
	return committed, nil
}
