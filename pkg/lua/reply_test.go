package lua

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// TestParseBatchReplyV2OneKey: the rules one key's reply of
// rate-batch-v2.lua must meet, as a batch of one key: the fields are
// committed, serverNow, code, remaining, retry, resetAt.
func TestParseBatchReplyV2OneKey(t *testing.T) {
	p := mustPolicy(t, limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}})
	pen := mustPolicy(t, limiter.PolicySpec{ID: "pen", Algorithm: limiter.FixedWindow, Penalty: limiter.Penalty{Duration: time.Minute},
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}})
	ints := func(s string) []Value {
		var out []Value
		for _, f := range strings.Fields(s) {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				out = append(out, Value{Str: f})
				continue
			}
			out = append(out, Value{Int: n, IsInt: true})
		}
		return out
	}
	code := func(st algorithm.Status, clamp int64) string {
		return strconv.FormatInt(int64(st)+statusMod*clamp, 10)
	}
	tests := []struct {
		name   string
		p      *limiter.Policy
		values string
		want   algorithm.Reply
		ok     bool
	}{
		{"allowed", p, "1 1000 " + code(algorithm.StatusAllowed, 0) + " 9 0 2000", algorithm.Reply{Status: algorithm.StatusAllowed, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10, Remaining: 9, ResetAtMs: 2000}, true},
		{"denied clamped", p, "1 1000 " + code(algorithm.StatusDenied, 500) + " 0 500 2000", algorithm.Reply{Status: algorithm.StatusDenied, ServerNowMs: 1000, EffectiveNowMs: 1500, Limit: 10, RetryAfterMs: 500, ResetAtMs: 2000}, true},
		{"clock unsafe", p, "0 1000 " + code(algorithm.StatusClockUnsafe, 0) + " 0 0 0", algorithm.Reply{Status: algorithm.StatusClockUnsafe, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10}, true},
		{"incompatible", p, "0 1000 " + code(algorithm.StatusStateIncompatible, 0) + " 0 0 0", algorithm.Reply{Status: algorithm.StatusStateIncompatible, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10}, true},
		{"invalid", p, "0 1000 " + code(algorithm.StatusInvalid, 0) + " 0 0 0", algorithm.Reply{Status: algorithm.StatusInvalid, ServerNowMs: 1000, EffectiveNowMs: 1000}, true},
		{"blocked", pen, "0 1000 " + code(algorithm.StatusBlocked, 0) + " 60000 60000 61000", algorithm.Reply{Status: algorithm.StatusBlocked, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10, RetryAfterMs: 60000, ResetAtMs: 61000, BlockLeftMs: 60000}, true},
		// The block ends before the limit admits: the retry waits for the limit.
		{"blocked shorter than its retry", pen, "0 1000 " + code(algorithm.StatusBlocked, 0) + " 30000 60000 61000", algorithm.Reply{Status: algorithm.StatusBlocked, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10, RetryAfterMs: 60000, ResetAtMs: 61000, BlockLeftMs: 30000}, true},
		{"blocked longer than its retry", pen, "0 1000 " + code(algorithm.StatusBlocked, 0) + " 60001 60000 61000", algorithm.Reply{}, false},
		{"blocked without its block", pen, "0 1000 " + code(algorithm.StatusBlocked, 0) + " 0 60000 61000", algorithm.Reply{}, false},
		{"max safe", p, "1 9007199254740991 " + code(algorithm.StatusAllowed, 0) + " 0 0 9007199254740991", algorithm.Reply{Status: algorithm.StatusAllowed, ServerNowMs: limiter.MaxSafeInteger, EffectiveNowMs: limiter.MaxSafeInteger, Limit: 10, ResetAtMs: limiter.MaxSafeInteger}, true},

		{"five fields", p, "1 1000 1 9 0", algorithm.Reply{}, false},
		{"seven fields", p, "1 1000 1 9 0 2000 1", algorithm.Reply{}, false},
		{"committed 2 with fields", p, "2 1000 1 9 0 2000", algorithm.Reply{}, false},
		{"server now a string", p, "1 x 1 9 0 2000", algorithm.Reply{}, false},
		{"code a string", p, "1 1000 ALLOWED 9 0 2000", algorithm.Reply{}, false},
		{"status 0", p, "1 1000 8 9 0 2000", algorithm.Reply{}, false},
		{"status 7", p, "1 1000 7 9 0 2000", algorithm.Reply{}, false},
		{"negative", p, "0 1000 2 -1 5 2000", algorithm.Reply{}, false},
		{"2^53", p, "1 9007199254740992 1 9 0 9007199254740992", algorithm.Reply{}, false},
		{"effective beyond 2^53", p, "1 9007199254740991 " + code(algorithm.StatusAllowed, 1) + " 9 0 9007199254740991", algorithm.Reply{}, false},
		{"allowed with retry", p, "1 1000 1 9 5 2000", algorithm.Reply{}, false},
		{"denied without retry", p, "0 1000 2 0 0 2000", algorithm.Reply{}, false},
		{"remaining above limit", p, "1 1000 1 11 0 2000", algorithm.Reply{}, false},
		{"clamp beyond policy", p, "1 1000 " + code(algorithm.StatusAllowed, 2001) + " 9 0 4000", algorithm.Reply{}, false},
		{"reset in the past", p, "1 1000 1 9 0 999", algorithm.Reply{}, false},
		{"unsafe with fields", p, "0 1000 3 1 0 0", algorithm.Reply{}, false},
		{"unsafe clamped", p, "0 1000 " + code(algorithm.StatusClockUnsafe, 5) + " 0 0 0", algorithm.Reply{}, false},
		{"incompatible with reset", p, "0 1000 4 0 0 5", algorithm.Reply{}, false},
		{"blocked without a penalty", p, "0 1000 6 0 60000 61000", algorithm.Reply{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]algorithm.Reply, 1)
			committed, err := ParseBatchReplyV2([]*limiter.Policy{tt.p}, ints(tt.values), out)
			if tt.ok != (err == nil) {
				t.Fatalf("ParseBatchReplyV2(%s) error = %v, want ok=%v", tt.values, err, tt.ok)
			}
			if err != nil {
				refused(t, err, committed)
				return
			}
			if out[0] != tt.want {
				t.Fatalf("ParseBatchReplyV2 = %v %+v, want %+v", committed, out[0], tt.want)
			}
			if enc := AppendReplyV2(nil, committed, out); !slices.Equal(enc, ints(tt.values)) {
				t.Fatalf("AppendReplyV2 = %+v, the reply was %s", enc, tt.values)
			}
		})
	}
	// Past the deadline, and a request that raised.
	out := make([]algorithm.Reply, 1)
	var expired *ExpiredError
	if _, err := ParseBatchReplyV2([]*limiter.Policy{p}, ints("2 1234"), out); !errors.As(err, &expired) || expired.ServerNowMs != 1234 {
		t.Fatalf("expired: %v", err)
	}
	if _, err := ParseBatchReplyV2([]*limiter.Policy{p}, ints("3 OOM"), out); !errors.Is(err, errRequestFailed) {
		t.Fatalf("failed: %v", err)
	}
	for _, bad := range []string{"2", "2 1234 0", "2 -1", "3 1", "2 x"} {
		if _, err := ParseBatchReplyV2([]*limiter.Policy{p}, ints(bad), out); !errors.Is(err, ErrMalformedReply) {
			t.Errorf("%q: error %v, want ErrMalformedReply", bad, err)
		}
	}
}

// TestStatusCodesV2: the codes reply-v2.lua writes are algorithm.Status's.
func TestStatusCodesV2(t *testing.T) {
	src := Batch().Source
	for _, st := range []algorithm.Status{algorithm.StatusAllowed, algorithm.StatusDenied, algorithm.StatusClockUnsafe,
		algorithm.StatusStateIncompatible, algorithm.StatusInvalid} {
		re := regexp.MustCompile(fmt.Sprintf(`status == '%s' then\s+code = (\d+)`, st))
		m := re.FindStringSubmatch(src)
		if m == nil || m[1] != strconv.Itoa(int(st)) {
			t.Errorf("%s: code %v in %s, want %d", st, m, Batch().Name, st)
		}
	}
	if !regexp.MustCompile(`else\s+code = 6\s+end`).MatchString(src) || algorithm.StatusBlocked != 6 {
		t.Errorf("BLOCKED is not code 6 in %s", Batch().Name)
	}
}

// fuzzPoliciesV2 are the policies FuzzParseBatchReplyV2 checks a reply
// against, key k against fuzzPoliciesV2[k%len]: every algorithm, a penalty
// box, a calendar window, the largest limit.
var fuzzPoliciesV2 = func() []*limiter.Policy {
	var out []*limiter.Policy
	for _, spec := range []limiter.PolicySpec{
		{ID: "fw", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}},
		{ID: "sw", Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: 5, Window: time.Minute}},
		{ID: "tb", Algorithm: limiter.TokenBucket, Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 1, RefillPeriod: time.Second}},
		{ID: "gc", Algorithm: limiter.GCRA, Params: limiter.GCRAParams{Burst: 4, Limit: 2, Period: time.Second}},
		{ID: "sl", Algorithm: limiter.SlidingLog, Params: limiter.SlidingLogParams{Limit: 3, Window: time.Second}},
		{ID: "pen", Algorithm: limiter.TokenBucket, Penalty: limiter.Penalty{Duration: time.Minute},
			Params: limiter.TokenBucketParams{Capacity: 3, RefillAmount: 1, RefillPeriod: time.Second}},
		{ID: "cal", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 7, Window: time.Hour, Calendar: &calendar.Calendar{Unit: calendar.Day, Location: time.UTC}}},
		{ID: "big", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: limiter.MaxSafeInteger, Window: time.Hour}},
	} {
		p, err := limiter.NewPolicy(spec)
		if err != nil {
			panic(err)
		}
		out = append(out, p)
	}
	return out
}()

func fuzzPolicySetV2(keys uint8) []*limiter.Policy {
	n := int(keys % 9)
	pols := make([]*limiter.Policy, n)
	for k := range pols {
		pols[k] = fuzzPoliciesV2[(k+int(keys/9))%len(fuzzPoliciesV2)]
	}
	return pols
}

// FuzzParseBatchReplyV2 feeds ParseBatchReplyV2 any reply (any number of
// values, integers or strings) for 0 to 8 keys of policies of every
// algorithm (with a penalty box and a calendar window among them). It must
// never panic; it refuses with ErrMalformedReply, or accepts a reply whose
// values are exactly the canonical encoding of what it returned
// (AppendReplyV2), every number in [0, 2^53-1], each key consistent with
// its policy, one serverNowMillis for the request.
func FuzzParseBatchReplyV2(f *testing.F) {
	f.Fuzz(func(t *testing.T, data string, keys uint8) {
		pols := fuzzPolicySetV2(keys)
		vals := decodeFuzzValues(data)
		out := make([]algorithm.Reply, len(pols))
		committed, err := ParseBatchReplyV2(pols, vals, out)
		var expired *ExpiredError
		var failed *FailedError
		switch {
		case errors.As(err, &expired):
			want := []Value{{Int: expiredFlag, IsInt: true}, {Int: expired.ServerNowMs, IsInt: true}}
			if committed || expired.ServerNowMs < 0 || expired.ServerNowMs > limiter.MaxSafeInteger || !slices.Equal(vals, want) {
				t.Fatalf("expired %v from %+v (committed %v)", expired, vals, committed)
			}
			return
		case errors.As(err, &failed):
			if committed || len(vals) != 2 || vals[1].IsInt || vals[1].Str != failed.Msg {
				t.Fatalf("failed %v from %+v", failed, vals)
			}
			return
		case err != nil:
			refused(t, err, committed)
			return
		}
		for k, r := range out {
			for _, v := range []int64{r.ServerNowMs, r.EffectiveNowMs, r.Limit, r.Remaining, r.RetryAfterMs, r.ResetAtMs} {
				if v < 0 || v > limiter.MaxSafeInteger {
					t.Fatalf("key %d: accepted out-of-range value %d", k+1, v)
				}
			}
			if r.ServerNowMs != out[0].ServerNowMs {
				t.Fatalf("key %d: accepted a second serverNowMillis", k+1)
			}
			switch r.Status {
			case algorithm.StatusAllowed, algorithm.StatusDenied, algorithm.StatusBlocked:
				if r.Remaining > r.Limit || (r.Status == algorithm.StatusAllowed) != (r.RetryAfterMs == 0) ||
					r.EffectiveNowMs < r.ServerNowMs || r.EffectiveNowMs-r.ServerNowMs > pols[k].MaxClockRegressionMillis() ||
					r.ResetAtMs < r.EffectiveNowMs || r.Status == algorithm.StatusBlocked && (!pols[k].Penalty().On() || r.Remaining != 0 ||
					r.BlockLeftMs < 1 || r.BlockLeftMs > r.RetryAfterMs) {
					t.Fatalf("key %d: accepted inconsistent %+v for %s", k+1, r, pols[k].ID())
				}
			default:
				if r.EffectiveNowMs != r.ServerNowMs || r.Remaining != 0 || r.RetryAfterMs != 0 || r.ResetAtMs != 0 {
					t.Fatalf("key %d: accepted a failure with fields %+v", k+1, r)
				}
			}
			if r.Status == algorithm.StatusInvalid {
				if r.Limit != 0 {
					t.Fatalf("key %d: accepted INVALID with limit %d", k+1, r.Limit)
				}
			} else if r.Limit != pols[k].Limit() {
				t.Fatalf("key %d: limit %d for a policy of %d", k+1, r.Limit, pols[k].Limit())
			}
		}
		if enc := AppendReplyV2(nil, committed, out); len(pols) > 0 && !slices.Equal(enc, vals) {
			t.Fatalf("accepted %+v, which is not the encoding %+v of what it returned", vals, enc)
		}
	})
}

// TestParseBatchReplyV2Corpus: the committed seeds of FuzzParseBatchReplyV2
// mean what their names say (valid-*, expired-*, failed-*, malformed-*), and
// the valid ones cover every algorithm, a penalty box's BLOCKED and a
// calendar window.
func TestParseBatchReplyV2Corpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseBatchReplyV2")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	algs := map[string]bool{}
	blocked := false
	for _, ent := range entries {
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 3 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s: not a corpus file of (string, uint8): %q", ent.Name(), lines)
		}
		data, err1 := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		keys, err2 := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(lines[2], "uint8("), ")"), 10, 8)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", ent.Name(), err1, err2)
		}
		pols := fuzzPolicySetV2(uint8(keys))
		out := make([]algorithm.Reply, len(pols))
		_, err = ParseBatchReplyV2(pols, decodeFuzzValues(data), out)
		kind, _, _ := strings.Cut(ent.Name(), "-")
		switch kind {
		case "valid":
			if err != nil {
				t.Errorf("%s: error %v", ent.Name(), err)
			}
			for k, p := range pols {
				algs[p.ID()] = true
				blocked = blocked || out[k].Status == algorithm.StatusBlocked
			}
		case "expired":
			if !errors.Is(err, ErrExpired) || errors.Is(err, ErrMalformedReply) {
				t.Errorf("%s: error %v, want ErrExpired", ent.Name(), err)
			}
		case "failed":
			if !errors.Is(err, errRequestFailed) {
				t.Errorf("%s: error %v, want errRequestFailed", ent.Name(), err)
			}
		case "malformed":
			if !errors.Is(err, ErrMalformedReply) {
				t.Errorf("%s: error %v, want ErrMalformedReply", ent.Name(), err)
			}
		default:
			t.Errorf("%s: name neither valid-*, expired-*, failed-* nor malformed-*", ent.Name())
		}
		seen[kind]++
	}
	for _, p := range fuzzPoliciesV2 {
		if !algs[p.ID()] {
			t.Errorf("no valid seed replies for policy %s", p.ID())
		}
	}
	if !blocked || seen["valid"] == 0 || seen["expired"] == 0 || seen["malformed"] == 0 || seen["failed"] == 0 {
		t.Errorf("corpus %v, a BLOCKED reply %v", seen, blocked)
	}
}

// decodeFuzzValues reads the reply a fuzz input stands for: values
// separated by single spaces, "#" followed by a decimal int64 an integer,
// anything else a bulk string.
func decodeFuzzValues(data string) []Value {
	var vals []Value
	for tok := range strings.SplitSeq(data, " ") {
		if n, err := strconv.ParseInt(strings.TrimPrefix(tok, "#"), 10, 64); err == nil && strings.HasPrefix(tok, "#") {
			vals = append(vals, Value{Int: n, IsInt: true})
			continue
		}
		vals = append(vals, Value{Str: tok})
	}
	return vals
}

// refused fails t unless a parser's error is ErrMalformedReply and
// the reply it refused is not reported as committed.
func refused(t *testing.T, err error, committed bool) {
	t.Helper()
	if !errors.Is(err, ErrMalformedReply) {
		t.Fatalf("error %v does not match ErrMalformedReply", err)
	}
	if committed {
		t.Fatal("committed with an error")
	}
}

// AppendReplyV2 appends the values rate-batch-v2.lua replies for one
// request that was evaluated (committed or not) to dst: the encoding
// ParseBatchReplyV2 reads; replies share one ServerNowMs.
func AppendReplyV2(dst []Value, committed bool, replies []algorithm.Reply) []Value {
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
		code := statusCodes[r.Status] + statusMod*(r.EffectiveNowMs-r.ServerNowMs)
		remaining := r.Remaining
		if r.Status == algorithm.StatusBlocked {
			remaining = r.BlockLeftMs
		}
		for _, v := range []int64{code, remaining, r.RetryAfterMs, r.ResetAtMs} {
			dst = append(dst, Value{Int: v, IsInt: true})
		}
	}
	return dst
}

// TestParseBatchReplyV2Reservations: a reserving policy's key adds three
// fields after every key's four, in key order: the identity of the
// reservation it holds, 0 or, for an ALLOWED key of a committed request,
// its effective now plus the TTL, pushed at most MaxReservations ms; the
// units its live reservations hold (up to MaxReservations times the max
// cost); the expired ones dropped (up to MaxReservations); anything else,
// or a missing field, is malformed.
func TestParseBatchReplyV2Reservations(t *testing.T) {
	plain := mustPolicy(t, limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}})
	res := mustPolicy(t, limiter.PolicySpec{ID: "r", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}, Reserve: limiter.Reserve{TTL: time.Minute}})
	pols := []*limiter.Policy{res, plain}
	val := func(ns ...int64) []Value {
		out := make([]Value, len(ns))
		for i, n := range ns {
			out[i] = Value{Int: n, IsInt: true}
		}
		return out
	}
	allowed := func(committed, hold int64) []Value {
		return val(committed, 1000, 1, 9, 0, 2000, 1, 9, 0, 2000, hold, 3, 2)
	}
	out := make([]algorithm.Reply, 2)
	for _, hold := range []int64{61_000, 61_000 + limiter.MaxReservations} {
		if c, err := ParseBatchReplyV2(pols, allowed(1, hold), out); err != nil || !c || out[0].HoldAtMs != hold || out[1].HoldAtMs != 0 ||
			out[0].ReservedUnits != 3 || out[0].Expired != 2 || out[1].ReservedUnits != 0 {
			t.Fatalf("a reservation at %d: %v %+v %v", hold, c, out, err)
		}
	}
	if c, err := ParseBatchReplyV2(pols, allowed(0, 0), out); err != nil || c || out[0].HoldAtMs != 0 {
		t.Fatalf("no reservation: %v %+v %v", c, out, err)
	}
	for name, vals := range map[string][]Value{
		"missing":                 val(1, 1000, 1, 9, 0, 2000, 1, 9, 0, 2000),
		"only the identity":       val(1, 1000, 1, 9, 0, 2000, 1, 9, 0, 2000, 61_000),
		"units past the bound":    val(1, 1000, 1, 9, 0, 2000, 1, 9, 0, 2000, 61_000, limiter.MaxReservations*res.MaxCost()+1, 0),
		"too many expired":        val(1, 1000, 1, 9, 0, 2000, 1, 9, 0, 2000, 61_000, 1, limiter.MaxReservations+1),
		"negative units":          val(1, 1000, 1, 9, 0, 2000, 1, 9, 0, 2000, 61_000, -1, 0),
		"too soon":                allowed(1, 60_999),
		"pushed too far":          allowed(1, 61_001+limiter.MaxReservations),
		"not committed":           allowed(0, 61_000),
		"denied":                  val(0, 1000, 2, 0, 5, 2000, 1, 9, 0, 2000, 61_000, 0, 0),
		"negative":                allowed(1, -1),
		"a string":                append(val(1, 1000, 1, 9, 0, 2000, 1, 9, 0, 2000), Value{Str: "61000"}, Value{IsInt: true}, Value{IsInt: true}),
		"one for the plain key":   append(allowed(1, 0), Value{IsInt: true}),
		"beyond 2^53 (too large)": allowed(1, limiter.MaxSafeInteger+1),
	} {
		if _, err := ParseBatchReplyV2(pols, vals, out); !errors.Is(err, ErrMalformedReply) {
			t.Errorf("%s: %v, want malformed", name, err)
		}
	}
}
