// Package lua holds the versioned Redis Lua programs of envoy-rls, their
// argument encoding and the strict parser of their replies. It has no
// network code: pkg/limiter/redis runs the programs.
//
// rate-batch-v1.lua is the one rate program: every limit of one Envoy
// request, checked at one TIME and committed all or nothing (limiter.Store).
// rate-refund-v1.lua gives back what a batch took when the request did not
// commit in another Redis Cluster slot.
//
// Each algorithm lives once, in its own file of fragments/ (with the shared
// prelude and the shared steps: reading TIME, the common argument rules,
// loading the state, the clock rule, the range check of what was computed,
// storing the state). A program's source names them with "-- #include
// <file>" lines, or "-- #include <file> <section>" for one section of an
// algorithm's file (valid, step, refund) at the program's dispatch on the
// algorithm; Assemble replaces them by the fragments' text when the package
// initializes. The fragments are blocks on agreed local names,
// not functions: a script's whole body runs on every EVALSHA, so a function
// would be a closure made on every call of the hot batch program.
package lua

import (
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var (
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
		"rate-batch-v1.lua": batchV1, "rate-refund-v1.lua": refundV1,
	} {
		a, err := Assemble(src, Fragment)
		if err != nil {
			panic(fmt.Sprintf("lua: %s: %v", name, err)) // a build defect: the embedded files are fixed
		}
		out[name] = a
	}
	return out
}()

// includePrefix starts a line that Assemble replaces by a fragment;
// sectionPrefix starts a line that opens a named section of a fragment.
const (
	includePrefix = "-- #include "
	sectionPrefix = "-- #section "
)

// Fragment returns the text of one file of fragments/ (e.g. "prelude.lua"),
// or, for "<file> <section>" (e.g. "token-bucket.lua step"), the lines of
// that file between "-- #section <section>" and the next section line or
// the end of the file.
func Fragment(name string) (string, error) {
	file, section, _ := strings.Cut(name, " ")
	b, err := fragmentFS.ReadFile("fragments/" + file)
	if err != nil {
		return "", fmt.Errorf("lua: no fragment %q", file)
	}
	if section == "" {
		return string(b), nil
	}
	var out strings.Builder
	in, found := false, false
	for line := range strings.Lines(string(b)) {
		if s, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), sectionPrefix); ok {
			in = strings.TrimSpace(s) == section
			found = found || in
			continue
		}
		if in {
			out.WriteString(line)
		}
	}
	if !found {
		return "", fmt.Errorf("lua: fragment %q has no section %q", file, section)
	}
	return out.String(), nil
}

// Assemble replaces every "-- #include <name>" line of src by the text of
// fragment name (a file, or a file and a section: see Fragment), verbatim.
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
	// Name is the file name, e.g. "rate-batch-v1.lua".
	Name string
	// Source is the embedded source with its fragments included, sent on
	// NOSCRIPT.
	Source string
}

func program(name string) Program { return Program{Name: name, Source: assembled[name]} }

// Batch returns rate-batch-v1.lua, the rate program of every algorithm.
func Batch() Program { return program("rate-batch-v1.lua") }

// Refund returns rate-refund-v1.lua.
func Refund() Program { return program("rate-refund-v1.lua") }

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

// RefundArgs is the number of ARGV fields per key of rate-refund-v1.lua.
const RefundArgs = 8

// AppendRefundArgs appends the eight ARGV fields of one key of
// rate-refund-v1.lua: algorithm, policy, revision, limit, the two algorithm
// arguments (limiter.Policy.AlgorithmArgs; for a calendar window, the end
// and the length in ms of the period holding effectiveNowMs instead), the
// cost taken and the effectiveNowMillis the batch replied for the key.
func AppendRefundArgs(dst []string, p *limiter.Policy, cost, effectiveNowMs int64) []string {
	i := strconv.FormatInt
	arg1, arg2 := refundWindow(p, effectiveNowMs)
	return append(dst, p.Algorithm().String(), p.ID(), strconv.FormatUint(uint64(p.Revision()), 10), i(p.Limit(), 10),
		i(arg1, 10), i(arg2, 10), i(cost, 10), i(effectiveNowMs, 10))
}

// Value is one element of a batch reply as the client decoded it: a bulk
// string (IsInt false) or an integer.
type Value struct {
	Str   string
	Int   int64
	IsInt bool
}

// GroupEntry is the length of one request's entry in the last ARGV field
// of rate-batch-v1.lua: struct.pack('>Hd').
const GroupEntry = 2 + 8

// MaxRequestKeys is the most keys one request of a group may have (its
// count is a 16-bit field).
const MaxRequestKeys = 1<<16 - 1

// AppendGroupEntry appends one request's entry of the last ARGV field of
// rate-batch-v1.lua to dst: its number of keys (1..MaxRequestKeys; its keys
// and their ARGV fields follow those of the requests before it) and its
// deadline in ms of Redis's clock (TIME), in [1, 2^53-1], or 0 for none. A
// request whose deadline the program's TIME is past is not evaluated,
// commits nothing and replies ExpiredFlag (see ParseBatchReply).
func AppendGroupEntry(dst []byte, keys int, deadlineMs int64) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(keys))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(deadlineMs)))
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
	if len(values) == 2 && values[0].IsInt && values[0].Int == ExpiredFlag {
		if v := values[1]; !v.IsInt || v.Int < 0 || v.Int > limiter.MaxSafeInteger {
			return false, malformed("expired reply with serverNowMillis %+v", v)
		}
		return false, &ExpiredError{ServerNowMs: values[1].Int}
	}
	if len(values) == 2 && values[0].IsInt && values[0].Int == FailedFlag && !values[1].IsInt {
		return false, &FailedError{Msg: values[1].Str}
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
