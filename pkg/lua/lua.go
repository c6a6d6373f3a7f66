// Package lua holds the versioned Redis Lua programs of envoy-rls, their
// argument encoding and the strict parsers of their replies. It has no
// network code: pkg/limiter/redis runs the programs.
//
// rate-batch-v1.lua is the program the Redis store runs: every limit of one
// Envoy request, checked at one TIME and committed all or nothing
// (limiter.Store). rate-refund-v1.lua gives back what a batch took when the
// request did not commit in another Redis Cluster slot. The single-key v1
// programs (rate-fixed-window-v1.lua, rate-sliding-counter-v1.lua,
// rate-token-bucket-v1.lua) each implement one algorithm, touch one hash
// key, call TIME once and reply an array of seven bulk strings: status,
// serverNowMillis, effectiveNowMillis, limit, remaining, retryAfterMillis,
// resetAtMillis. They share their state layout with the batch program.
//
// Each algorithm lives once, in fragments/ (with the shared prelude and the
// shared steps: reading TIME, the parameter rules, loading the state, the
// clock rule, storing the state): a program's source names them with
// "-- #include <file>" lines, which are replaced by the fragments' text when
// the package initializes, so the batch program and the single-key programs
// run the same text. The fragments are blocks on agreed local names, not
// functions: a script's whole body runs on every EVALSHA, so a function
// would be a closure made on every call of the hot batch program.
package lua

import (
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var (
	//go:embed rate-fixed-window-v1.lua
	fixedWindowV1 string
	//go:embed rate-sliding-counter-v1.lua
	slidingCounterV1 string
	//go:embed rate-token-bucket-v1.lua
	tokenBucketV1 string
	//go:embed rate-batch-v1.lua
	batchV1 string
	//go:embed rate-refund-v1.lua
	refundV1 string
	//go:embed fragments/*.lua
	fragmentFS embed.FS
)

// assembled holds every program's source with its fragments included,
// built once at init and never changed.
var assembled = func() map[string]string {
	out := map[string]string{}
	for name, src := range map[string]string{
		"rate-fixed-window-v1.lua": fixedWindowV1, "rate-sliding-counter-v1.lua": slidingCounterV1,
		"rate-token-bucket-v1.lua": tokenBucketV1, "rate-batch-v1.lua": batchV1, "rate-refund-v1.lua": refundV1,
	} {
		a, err := Assemble(src, Fragment)
		if err != nil {
			panic(fmt.Sprintf("lua: %s: %v", name, err)) // a build defect: the embedded files are fixed
		}
		out[name] = a
	}
	return out
}()

// includePrefix starts a line that Assemble replaces by a fragment.
const includePrefix = "-- #include "

// Fragment returns the text of one file of fragments/ (e.g. "prelude.lua").
func Fragment(name string) (string, error) {
	b, err := fragmentFS.ReadFile("fragments/" + name)
	if err != nil {
		return "", fmt.Errorf("lua: no fragment %q", name)
	}
	return string(b), nil
}

// Assemble replaces every "-- #include <name>" line of src by the text of
// fragment name, verbatim.
func Assemble(src string, fragment func(name string) (string, error)) (string, error) {
	var b strings.Builder
	for line := range strings.Lines(src) {
		name, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), includePrefix)
		if !ok {
			b.WriteString(line)
			continue
		}
		f, err := fragment(strings.TrimSpace(name))
		if err != nil {
			return "", err
		}
		b.WriteString(f)
	}
	return b.String(), nil
}

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
		return program("rate-fixed-window-v1.lua", a), true
	case limiter.SlidingWindow:
		return program("rate-sliding-counter-v1.lua", a), true
	case limiter.TokenBucket:
		return program("rate-token-bucket-v1.lua", a), true
	}
	return Program{}, false
}

func program(name string, a limiter.Algorithm) Program {
	return Program{Name: name, Source: assembled[name], Algorithm: a}
}

// Batch returns rate-batch-v1.lua (Algorithm 0: it runs every algorithm).
func Batch() Program { return program("rate-batch-v1.lua", 0) }

// Refund returns rate-refund-v1.lua.
func Refund() Program { return program("rate-refund-v1.lua", 0) }

// Programs returns the single-key programs, in algorithm order.
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
	st, ok := parseStatus(fields[0])
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

// BatchArgs is the number of ARGV fields per key of rate-batch-v1.lua.
const BatchArgs = 2

// BatchPacked is the length of the packed numbers of one key:
// struct.pack('>BBddddddd').
const BatchPacked = 2 + 7*8

// AppendBatchArgs appends the two ARGV fields of one key of
// rate-batch-v1.lua to dst: the policy ID, and the numbers packed
// big-endian as struct.pack('>BBddddddd'): algorithm (limiter.Algorithm),
// flags (role + 4 when the policy fails open), revision, limit, window ms
// (token bucket: refill amount), 0 (token bucket: refill period ms), cleanup
// grace ms, max clock regression ms, cost. Every number is an integer below
// 2^53, which a float64 holds exactly. role is the mode the key plays in
// this program (limiter.Request.Role, or another one when the caller splits
// a batch).
func AppendBatchArgs(dst []string, p *limiter.Policy, cost int64, role limiter.Mode) []string {
	var b [BatchPacked]byte
	return append(dst, p.ID(), string(AppendBatchPacked(b[:0], p, cost, role)))
}

// AppendBatchPacked appends the packed numbers of one key of
// rate-batch-v1.lua (the second ARGV field of AppendBatchArgs, BatchPacked
// bytes) to dst, for callers that pool their argument buffers.
func AppendBatchPacked(dst []byte, p *limiter.Policy, cost int64, role limiter.Mode) []byte {
	dst = slices.Grow(dst, BatchPacked)
	b := dst[len(dst) : len(dst)+BatchPacked]
	b[0] = byte(p.Algorithm())
	b[1] = byte(role)
	if p.FailureMode() == limiter.FailOpen {
		b[1] += 4
	}
	p2, p3 := p.WindowMillis(), int64(0)
	if p.Algorithm() == limiter.TokenBucket {
		p2, p3 = p.Refill()
	}
	for i, v := range [7]int64{int64(p.Revision()), p.Limit(), p2, p3, p.CleanupGraceMillis(), p.MaxClockRegressionMillis(), cost} {
		binary.BigEndian.PutUint64(b[2+8*i:], math.Float64bits(float64(v)))
	}
	return dst[:len(dst)+BatchPacked]
}

// RefundArgs is the number of ARGV fields per key of rate-refund-v1.lua.
const RefundArgs = 8

// AppendRefundArgs appends the eight ARGV fields of one key of
// rate-refund-v1.lua: algorithm, policy, revision, limit, window ms (token
// bucket: refill amount), 0 (token bucket: refill period ms), the cost taken
// and the effectiveNowMillis the batch replied for the key.
func AppendRefundArgs(dst []string, p *limiter.Policy, cost, effectiveNowMs int64) []string {
	i := strconv.FormatInt
	p2, p3 := p.WindowMillis(), int64(0)
	if p.Algorithm() == limiter.TokenBucket {
		p2, p3 = p.Refill()
	}
	return append(dst, p.Algorithm().String(), p.ID(), strconv.FormatUint(uint64(p.Revision()), 10), i(p.Limit(), 10),
		i(p2, 10), i(p3, 10), i(cost, 10), i(effectiveNowMs, 10))
}

// Value is one element of a batch reply as the client decoded it: a bulk
// string (IsInt false) or an integer.
type Value struct {
	Str   string
	Int   int64
	IsInt bool
}

// ParseBatchReply validates the reply of rate-batch-v1.lua for the given
// policies (one per key, in order) and writes one reply per key into out.
// The reply must be exactly 1 + 7N values: the committed flag (integer 0 or
// 1), then per key a known status (bulk string) and six integers in
// [0, 2^53-1] that ParseReply's consistency rules accept, every key with the
// same serverNowMillis (one TIME). Anything else is an error matching
// ErrMalformedReply, for the whole batch.
func ParseBatchReply(policies []*limiter.Policy, values []Value, out []limiter.Reply) (committed bool, err error) {
	n := len(policies)
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
