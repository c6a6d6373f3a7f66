package lua

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func TestParseBatchReply(t *testing.T) {
	p := mustPolicy(t, limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}})
	pols := []*limiter.Policy{p, p}
	i := func(n int64) Value { return Value{Int: n, IsInt: true} }
	s := func(v string) Value { return Value{Str: v} }
	good := []Value{i(1), s("ALLOWED"), i(1000), i(1000), i(10), i(9), i(0), i(2000), s("DENIED"), i(1000), i(1000), i(10), i(0), i(500), i(2000)}
	out := make([]limiter.Reply, 2)
	committed, err := ParseBatchReply(pols, good, out)
	if err != nil || !committed || out[0].Remaining != 9 || out[1].Status != limiter.StatusDenied || out[1].RetryAfterMs != 500 {
		t.Fatalf("good: %v %v %+v", committed, err, out)
	}
	with := func(k int, v Value) []Value {
		c := append([]Value(nil), good...)
		c[k] = v
		return c
	}
	for name, vals := range map[string][]Value{
		"short":                 good[:14],
		"long":                  append(append([]Value(nil), good...), i(0)),
		"flag 2":                with(0, i(2)),
		"flag string":           with(0, s("1")),
		"status integer":        with(1, i(1)),
		"unknown status":        with(1, s("OK")),
		"number as string":      with(2, s("1000")),
		"negative":              with(5, i(-1)),
		"2^53":                  with(7, i(limiter.MaxSafeInteger+1)),
		"allowed with retry":    with(6, i(5)),
		"wrong limit":           with(4, i(11)),
		"two clocks":            with(9, i(1001)),
		"denied without retry":  with(13, i(0)),
		"remaining above limit": with(5, i(11)),
	} {
		if _, err := ParseBatchReply(pols, vals, out); !errors.Is(err, ErrMalformedReply) {
			t.Errorf("%s: error %v, want ErrMalformedReply", name, err)
		}
	}

	// Past the deadline: { 2, serverNow }, nothing committed, out untouched.
	out = make([]limiter.Reply, 2)
	committed, err = ParseBatchReply(pols, []Value{i(ExpiredFlag), i(1234)}, out)
	var expired *ExpiredError
	if committed || !errors.Is(err, ErrExpired) || errors.Is(err, ErrMalformedReply) || !errors.As(err, &expired) ||
		expired.ServerNowMs != 1234 || out[0] != (limiter.Reply{}) || out[1] != (limiter.Reply{}) {
		t.Fatalf("expired: %v %v %+v", committed, err, out)
	}
	for name, vals := range map[string][]Value{
		"expired alone":          {i(2)},
		"expired with a field":   {i(2), i(1234), i(0)},
		"expired negative time":  {i(2), i(-1)},
		"expired time 2^53":      {i(2), i(limiter.MaxSafeInteger + 1)},
		"expired time as string": {i(2), s("1234")},
		"expired flag as string": {s("2"), i(1234)},
		"flag 3":                 {i(3), i(1234)},
		"expired and a key":      append([]Value{i(2), i(1234)}, good[1:8]...),
	} {
		if _, err := ParseBatchReply(pols, vals, out); !errors.Is(err, ErrMalformedReply) {
			t.Errorf("%s: error %v, want ErrMalformedReply", name, err)
		}
	}
}

// TestParseBatchReplyOneKey: the rules one key's reply must meet, as a
// batch of one key. A field given as canonical decimal text is an integer
// value; any other text stays a bulk string, which no number may be.
func TestParseBatchReplyOneKey(t *testing.T) {
	p := mustPolicy(t, limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}})
	values := func(fields []string) []Value {
		vals := []Value{{Int: 1, IsInt: true}}
		for k, f := range fields {
			if n, err := strconv.ParseInt(f, 10, 64); err == nil && k > 0 && strconv.FormatInt(n, 10) == f {
				vals = append(vals, Value{Int: n, IsInt: true})
				continue
			}
			vals = append(vals, Value{Str: f})
		}
		return vals
	}
	f := func(s string) []string { return strings.Split(s, " ") }
	tests := []struct {
		name   string
		fields []string
		want   limiter.Reply
		ok     bool
	}{
		{"allowed", f("ALLOWED 1000 1000 10 9 0 2000"), limiter.Reply{Status: limiter.StatusAllowed, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10, Remaining: 9, ResetAtMs: 2000}, true},
		{"denied clamped", f("DENIED 1000 1500 10 0 500 2000"), limiter.Reply{Status: limiter.StatusDenied, ServerNowMs: 1000, EffectiveNowMs: 1500, Limit: 10, RetryAfterMs: 500, ResetAtMs: 2000}, true},
		{"clock unsafe", f("CLOCK_UNSAFE 1000 1000 10 0 0 0"), limiter.Reply{Status: limiter.StatusClockUnsafe, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10}, true},
		{"incompatible", f("STATE_INCOMPATIBLE 1000 1000 10 0 0 0"), limiter.Reply{Status: limiter.StatusStateIncompatible, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10}, true},
		{"invalid", f("INVALID 1000 1000 0 0 0 0"), limiter.Reply{Status: limiter.StatusInvalid, ServerNowMs: 1000, EffectiveNowMs: 1000}, true},
		{"max safe", f("ALLOWED 9007199254740991 9007199254740991 10 0 0 9007199254740991"), limiter.Reply{Status: limiter.StatusAllowed, ServerNowMs: limiter.MaxSafeInteger, EffectiveNowMs: limiter.MaxSafeInteger, Limit: 10, ResetAtMs: limiter.MaxSafeInteger}, true},

		{"six fields", f("ALLOWED 1000 1000 10 9 0"), limiter.Reply{}, false},
		{"eight fields", f("ALLOWED 1000 1000 10 9 0 2000 1"), limiter.Reply{}, false},
		{"no fields", nil, limiter.Reply{}, false},
		{"lower-case status", f("allowed 1000 1000 10 9 0 2000"), limiter.Reply{}, false},
		{"unknown status", f("OK 1000 1000 10 9 0 2000"), limiter.Reply{}, false},
		{"negative", f("DENIED 1000 1000 10 -1 5 2000"), limiter.Reply{}, false},
		{"plus sign", f("ALLOWED +1000 1000 10 9 0 2000"), limiter.Reply{}, false},
		{"float", f("ALLOWED 1000 1000 10 9.0 0 2000"), limiter.Reply{}, false},
		{"exponent", f("ALLOWED 1e3 1000 10 9 0 2000"), limiter.Reply{}, false},
		{"leading zero", f("ALLOWED 01000 1000 10 9 0 2000"), limiter.Reply{}, false},
		{"empty number", []string{"ALLOWED", "1000", "", "10", "9", "0", "2000"}, limiter.Reply{}, false},
		{"space", []string{"ALLOWED", "1000", "1000 ", "10", "9", "0", "2000"}, limiter.Reply{}, false},
		{"2^53", f("ALLOWED 9007199254740992 9007199254740992 10 9 0 9007199254740992"), limiter.Reply{}, false},
		{"17 digits", f("ALLOWED 10000000000000000 1000 10 9 0 2000"), limiter.Reply{}, false},
		{"allowed with retry", f("ALLOWED 1000 1000 10 9 5 2000"), limiter.Reply{}, false},
		{"denied without retry", f("DENIED 1000 1000 10 0 0 2000"), limiter.Reply{}, false},
		{"remaining above limit", f("ALLOWED 1000 1000 10 11 0 2000"), limiter.Reply{}, false},
		{"wrong limit", f("ALLOWED 1000 1000 11 9 0 2000"), limiter.Reply{}, false},
		{"effective before server", f("ALLOWED 1000 999 10 9 0 2000"), limiter.Reply{}, false},
		{"clamp beyond policy", f("ALLOWED 1000 3001 10 9 0 4000"), limiter.Reply{}, false},
		{"reset in the past", f("ALLOWED 1000 1000 10 9 0 999"), limiter.Reply{}, false},
		{"unsafe with fields", f("CLOCK_UNSAFE 1000 1000 10 1 0 0"), limiter.Reply{}, false},
		{"incompatible with reset", f("STATE_INCOMPATIBLE 1000 1000 10 0 0 5"), limiter.Reply{}, false},
		{"invalid with limit", f("INVALID 1000 1000 10 0 0 0"), limiter.Reply{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]limiter.Reply, 1)
			committed, err := ParseBatchReply([]*limiter.Policy{p}, values(tt.fields), out)
			if tt.ok != (err == nil) {
				t.Fatalf("ParseBatchReply(%q) error = %v, want ok=%v", tt.fields, err, tt.ok)
			}
			if err != nil {
				refused(t, err, committed)
				return
			}
			if !committed || out[0] != tt.want {
				t.Fatalf("ParseBatchReply = %v %+v, want true %+v", committed, out[0], tt.want)
			}
		})
	}
}

// fuzzPolicies are the policies FuzzParseBatchReply checks a reply
// against, key k against fuzzPolicies[k%4].
var fuzzPolicies = func() []*limiter.Policy {
	var out []*limiter.Policy
	for _, spec := range []limiter.PolicySpec{
		{ID: "fw", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}},
		{ID: "sw", Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: 5, Window: time.Minute}},
		{ID: "tb", Algorithm: limiter.TokenBucket, Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 1, RefillPeriod: time.Second}},
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

// FuzzParseBatchReply feeds ParseBatchReply any reply (any number of values,
// integers or strings) for 0 to 4 keys. It must never panic; it refuses
// with ErrMalformedReply, or accepts a reply whose values are exactly the
// canonical encoding of what it returned, every number in [0, 2^53-1],
// consistent with the key's policy, one serverNowMillis for the batch.
func FuzzParseBatchReply(f *testing.F) {
	f.Fuzz(func(t *testing.T, data string, keys uint8) {
		n := int(keys % 5)
		pols := make([]*limiter.Policy, n)
		for k := range pols {
			pols[k] = fuzzPolicies[k%len(fuzzPolicies)]
		}
		vals := decodeFuzzValues(data)
		out := make([]limiter.Reply, n)
		committed, err := ParseBatchReply(pols, vals, out)
		var expired *ExpiredError
		if errors.As(err, &expired) {
			// Past the deadline: exactly { 2, serverNow }.
			want := []Value{{Int: ExpiredFlag, IsInt: true}, {Int: expired.ServerNowMs, IsInt: true}}
			if committed || expired.ServerNowMs < 0 || expired.ServerNowMs > limiter.MaxSafeInteger || !slices.Equal(vals, want) {
				t.Fatalf("expired %v from %+v (committed %v)", expired, vals, committed)
			}
			return
		}
		if err != nil {
			refused(t, err, committed)
			return
		}
		flag := int64(0)
		if committed {
			flag = 1
		}
		enc := []Value{{Int: flag, IsInt: true}}
		for k, r := range out {
			enc = append(enc, Value{Str: r.Status.String()})
			for _, v := range []int64{r.ServerNowMs, r.EffectiveNowMs, r.Limit, r.Remaining, r.RetryAfterMs, r.ResetAtMs} {
				if v < 0 || v > limiter.MaxSafeInteger {
					t.Fatalf("key %d: accepted out-of-range value %d", k+1, v)
				}
				enc = append(enc, Value{Int: v, IsInt: true})
			}
			if r.ServerNowMs != out[0].ServerNowMs {
				t.Fatalf("key %d: accepted a second serverNowMillis", k+1)
			}
			switch r.Status {
			case limiter.StatusAllowed, limiter.StatusDenied:
				if r.Remaining > r.Limit || (r.Status == limiter.StatusAllowed) != (r.RetryAfterMs == 0) ||
					r.EffectiveNowMs < r.ServerNowMs || r.EffectiveNowMs-r.ServerNowMs > pols[k].MaxClockRegressionMillis() ||
					r.ResetAtMs < r.EffectiveNowMs {
					t.Fatalf("key %d: accepted inconsistent %+v", k+1, r)
				}
			default:
				if r.EffectiveNowMs != r.ServerNowMs || r.Remaining != 0 || r.RetryAfterMs != 0 || r.ResetAtMs != 0 {
					t.Fatalf("key %d: accepted a failure with fields %+v", k+1, r)
				}
			}
			if r.Status == limiter.StatusInvalid {
				if r.Limit != 0 {
					t.Fatalf("key %d: accepted INVALID with limit %d", k+1, r.Limit)
				}
			} else if r.Limit != pols[k].Limit() {
				t.Fatalf("key %d: accepted limit %d for a policy of %d", k+1, r.Limit, pols[k].Limit())
			}
		}
		if !slices.Equal(enc, vals) {
			t.Fatalf("accepted %+v, which is not the encoding %+v of what it returned", vals, enc)
		}
	})
}

// TestParseBatchReplyCorpus: the committed seeds of FuzzParseBatchReply
// mean what their names say: ParseBatchReply accepts every valid-* reply,
// reports every expired-* one as ErrExpired and refuses every malformed-*
// one.
func TestParseBatchReplyCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseBatchReply")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
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
		n := int(keys % 5)
		pols := make([]*limiter.Policy, n)
		for k := range pols {
			pols[k] = fuzzPolicies[k%len(fuzzPolicies)]
		}
		_, err = ParseBatchReply(pols, decodeFuzzValues(data), make([]limiter.Reply, n))
		kind, _, _ := strings.Cut(ent.Name(), "-")
		switch kind {
		case "valid":
			if err != nil {
				t.Errorf("%s: error %v", ent.Name(), err)
			}
		case "expired":
			if !errors.Is(err, ErrExpired) || errors.Is(err, ErrMalformedReply) {
				t.Errorf("%s: error %v, want ErrExpired", ent.Name(), err)
			}
		case "malformed":
			if !errors.Is(err, ErrMalformedReply) {
				t.Errorf("%s: error %v, want ErrMalformedReply", ent.Name(), err)
			}
		default:
			t.Errorf("%s: name neither valid-*, expired-* nor malformed-*", ent.Name())
		}
		seen[kind]++
	}
	if seen["valid"] == 0 || seen["expired"] == 0 || seen["malformed"] == 0 {
		t.Errorf("corpus of %d valid, %d expired and %d malformed replies", seen["valid"], seen["expired"], seen["malformed"])
	}
}

// refused fails t unless a ParseBatchReply error is ErrMalformedReply and
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

// TestParseStatus: every status the programs write parses to its
// limiter.Status and reads the same in errors; nothing else parses.
func TestParseStatus(t *testing.T) {
	for _, st := range []limiter.Status{limiter.StatusAllowed, limiter.StatusDenied, limiter.StatusClockUnsafe,
		limiter.StatusStateIncompatible, limiter.StatusInvalid} {
		w := statusWire[st]
		if got, ok := parseStatus(w); !ok || got != st {
			t.Errorf("parseStatus(%q) = %v, %v; want %v", w, got, ok, st)
		}
		if w != st.String() {
			t.Errorf("status %d: wire %q, String %q", st, w, st.String())
		}
	}
	for _, s := range []string{"", "allowed", "ALLOWED ", "UNKNOWN", "OK"} {
		if st, ok := parseStatus(s); ok {
			t.Errorf("parseStatus(%q) = %v, want not ok", s, st)
		}
	}
}
