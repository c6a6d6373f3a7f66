// Package lua holds the versioned Redis Lua programs of envoy-rls, their
// argument encoding and the strict parser of their seven-field reply. It has no
// network code: pkg/limiter/redis runs the programs.
//
// Each program (rate-fixed-window-v1.lua, rate-sliding-counter-v1.lua,
// rate-token-bucket-v1.lua) implements one algorithm of docs/algorithms.md
// exactly as limiter.Apply does, touches one hash key, calls TIME once and
// replies an array of seven bulk strings: status, serverNowMillis,
// effectiveNowMillis, limit, remaining, retryAfterMillis, resetAtMillis. The
// numbers are canonical decimal strings (not RESP integers), so that a
// non-integer can never be truncated on its way out of Lua.
package lua

import (
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var (
	//go:embed rate-fixed-window-v1.lua
	fixedWindowV1 string
	//go:embed rate-sliding-counter-v1.lua
	slidingCounterV1 string
	//go:embed rate-token-bucket-v1.lua
	tokenBucketV1 string
)

// Program is one versioned Lua program.
type Program struct {
	// Name is the file name, e.g. "rate-fixed-window-v1.lua".
	Name string
	// Source is the exact embedded source, sent on NOSCRIPT.
	Source string
	// Algorithm is the algorithm the program implements.
	Algorithm limiter.Algorithm
}

// ProgramFor returns the current program of an algorithm; ok is false for an
// unknown algorithm.
func ProgramFor(a limiter.Algorithm) (p Program, ok bool) {
	switch a {
	case limiter.FixedWindow:
		return Program{Name: "rate-fixed-window-v1.lua", Source: fixedWindowV1, Algorithm: a}, true
	case limiter.SlidingWindow:
		return Program{Name: "rate-sliding-counter-v1.lua", Source: slidingCounterV1, Algorithm: a}, true
	case limiter.TokenBucket:
		return Program{Name: "rate-token-bucket-v1.lua", Source: tokenBucketV1, Algorithm: a}, true
	}
	return Program{}, false
}

// Programs returns every program, in algorithm order.
func Programs() []Program {
	out := make([]Program, 0, 3)
	for _, a := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.TokenBucket} {
		p, _ := ProgramFor(a)
		out = append(out, p)
	}
	return out
}

// AppendArgs appends the ARGV of p's program for one request of the given cost
// to dst (see the header comment of each program):
//
//	fixed and sliding window: policy, revision, limit, window ms, max cost,
//	                          cleanup grace ms, max clock regression ms, cost
//	token bucket:             policy, revision, capacity, refill amount,
//	                          refill period ms (both reduced), max cost,
//	                          cleanup grace ms, max clock regression ms, cost
func AppendArgs(dst []string, p *limiter.Policy, cost int64) []string {
	i := strconv.FormatInt
	dst = append(dst, p.ID(), strconv.FormatUint(uint64(p.Revision()), 10), i(p.Limit(), 10))
	if p.Algorithm() == limiter.TokenBucket {
		amount, period := p.Refill()
		dst = append(dst, i(amount, 10), i(period, 10))
	} else {
		dst = append(dst, i(p.WindowMillis(), 10))
	}
	return append(dst, i(p.MaxCost(), 10), i(p.CleanupGraceMillis(), 10),
		i(p.MaxClockRegressionMillis(), 10), i(cost, 10))
}

// ReplyFields is the number of fields of every program reply.
const ReplyFields = 7

// ErrMalformedReply is matched (errors.Is) by every ParseReply error.
var ErrMalformedReply = errors.New("lua: malformed program reply")

type replyError struct{ msg string }

func (e *replyError) Error() string        { return "lua: malformed program reply: " + e.msg }
func (e *replyError) Is(target error) bool { return target == ErrMalformedReply }

func malformed(format string, args ...any) error {
	return &replyError{msg: fmt.Sprintf(format, args...)}
}

var fieldNames = [ReplyFields]string{"status", "serverNowMillis", "effectiveNowMillis", "limit", "remaining", "retryAfterMillis", "resetAtMillis"}

// ParseReply validates the seven fields of a program reply and returns them.
// Anything but exactly seven fields, a known status and six canonical decimal
// integers in [0, 2^53-1] that are consistent with each other (and, when p is
// not nil, with the policy) is an error matching ErrMalformedReply — which the
// store reports as an Incompatible outcome, never as an allow.
//
// Consistency: effectiveNow >= serverNow, by at most the policy's clock
// regression; ALLOWED has retryAfter 0, DENIED at least 1, both remaining <=
// limit and resetAt >= effectiveNow; CLOCK_UNSAFE and STATE_INCOMPATIBLE carry
// (serverNow, serverNow, limit, 0, 0, 0) and INVALID (serverNow, serverNow, 0,
// 0, 0, 0); the limit is the policy's.
func ParseReply(p *limiter.Policy, fields []string) (limiter.Reply, error) {
	var r limiter.Reply
	if len(fields) != ReplyFields {
		return r, malformed("%d fields, want %d", len(fields), ReplyFields)
	}
	st, ok := limiter.ParseStatus(fields[0])
	if !ok {
		return r, malformed("unknown status %q", truncate(fields[0]))
	}
	var n [ReplyFields]int64
	for i := 1; i < ReplyFields; i++ {
		v, err := parseUint(fields[i])
		if err != nil {
			return r, malformed("%s: %v", fieldNames[i], err)
		}
		n[i] = v
	}
	r = limiter.Reply{Status: st, ServerNowMs: n[1], EffectiveNowMs: n[2], Limit: n[3], Remaining: n[4], RetryAfterMs: n[5], ResetAtMs: n[6]}
	if err := check(p, r); err != nil {
		return limiter.Reply{}, err
	}
	return r, nil
}

func check(p *limiter.Policy, r limiter.Reply) error {
	switch r.Status {
	case limiter.StatusAllowed, limiter.StatusDenied:
		if r.EffectiveNowMs < r.ServerNowMs {
			return malformed("effectiveNowMillis %d before serverNowMillis %d", r.EffectiveNowMs, r.ServerNowMs)
		}
		if p != nil && r.EffectiveNowMs-r.ServerNowMs > p.MaxClockRegressionMillis() {
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
	if p != nil && r.Limit != p.Limit() {
		return malformed("limit %d, the policy's is %d", r.Limit, p.Limit())
	}
	return nil
}

// parseUint accepts only canonical decimal integers in [0, 2^53-1]: digits,
// no sign, no leading zero, no spaces, at most 16 digits.
func parseUint(s string) (int64, error) {
	if len(s) == 0 {
		return 0, errors.New("empty number")
	}
	if len(s) > 16 {
		return 0, fmt.Errorf("number of %d digits", len(s))
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("leading zero in %q", s)
	}
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("not a decimal integer: %q", s)
		}
		v = v*10 + int64(c-'0')
	}
	if v > limiter.MaxSafeInteger {
		return 0, fmt.Errorf("%s above 2^53-1", s)
	}
	return v, nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
