package lua

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDemandProgramShape: the demand program's header names its key,
// arguments and reply; it reads TIME once and calls only the hash
// commands its header names, which the ACL user docs/redis.md documents
// may run; its bounds are the package's.
func TestDemandProgramShape(t *testing.T) {
	src := Demand().Source
	for _, want := range []string{"-- KEYS[1]", "-- ARGV[3]", "-- Reply:",
		"local MAX_TTL = 3600000 ", "local MAX_DEMANDS = 1024 ", "local MAX_REPLICAS = 64 "} {
		if !strings.Contains(src, want) {
			t.Errorf("demand-v1.lua: missing %q", want)
		}
	}
	if MaxDemandTTL != 3600000*time.Millisecond || MaxDemands != 1024 || MaxDemandReplicas != 64 {
		t.Errorf("bounds %s %d %d differ from the program's", MaxDemandTTL, MaxDemands, MaxDemandReplicas)
	}
	if n := strings.Count(src, "redis.call('TIME')"); n != 1 {
		t.Errorf("TIME called %d times", n)
	}
	var calls []string
	for _, m := range regexp.MustCompile(`redis\.p?call\('([A-Z]+)'`).FindAllStringSubmatch(src, -1) {
		calls = append(calls, m[1])
	}
	slices.Sort(calls)
	if want := []string{"HDEL", "HGETALL", "HLEN", "HSET", "PEXPIRE", "TIME"}; !slices.Equal(slices.Compact(calls), want) {
		t.Errorf("demand-v1.lua calls %v, want %v", calls, want)
	}
	doc, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range calls {
		if !strings.Contains(string(doc), "+"+strings.ToLower(name)) {
			t.Errorf("docs/redis.md's ACL user lacks +%s", strings.ToLower(name))
		}
	}
}

func TestDemandArgs(t *testing.T) {
	got, err := DemandArgs("a1", 300*time.Millisecond, []int64{0, 1500, math.MaxInt64})
	want := []string{"a1", "300", "\x00\x00\x00\x00\x00\x00\x00\x00" + "\x00\x00\x00\x00\x00\x00\x05\xdc" + "\x7f\xff\xff\xff\xff\xff\xff\xff"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("DemandArgs = %q, %v; want %q", got, err, want)
	}
	if got, err := DemandArgs(strings.Repeat("r", 64), MaxDemandTTL, make([]int64, MaxDemands)); err != nil || len(got[2]) != 8*MaxDemands || got[1] != "3600000" {
		t.Errorf("at the bounds: %d bytes, ttl %q, %v", len(got[2]), got[1], err)
	}
	for name, c := range map[string]struct {
		replica string
		ttl     time.Duration
		demands []int64
	}{
		"no replica":          {"", time.Second, nil},
		"replica of 65 bytes": {strings.Repeat("r", 65), time.Second, nil},
		"ttl 0":               {"r", 0, nil},
		"ttl of a fraction":   {"r", 1500 * time.Microsecond, nil},
		"ttl above the bound": {"r", MaxDemandTTL + time.Millisecond, nil},
		"1025 demands":        {"r", time.Second, make([]int64, MaxDemands+1)},
		"a negative demand":   {"r", time.Second, []int64{1, -1}},
	} {
		if got, err := DemandArgs(c.replica, c.ttl, c.demands); err == nil {
			t.Errorf("%s: accepted as %q", name, got)
		}
	}
}

// demandBytes packs demands as demand-v1.lua's reply carries them.
func demandBytes(ds ...uint64) string {
	var b []byte
	for _, d := range ds {
		b = binary.BigEndian.AppendUint64(b, d)
	}
	return string(b)
}

func TestParseDemandReply(t *testing.T) {
	prior := []int64{7}
	got, err := ParseDemandReply([]Value{{Str: demandBytes(1, 2)}, {Str: ""}, {Str: demandBytes(math.MaxInt64)}}, prior)
	if want := []int64{7, 1, 2, math.MaxInt64}; err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	if got, err := ParseDemandReply(nil, nil); err != nil || len(got) != 0 {
		t.Errorf("no other replica: %v, %v", got, err)
	}
	full := make([]Value, MaxDemandReplicas-1)
	for i := range full {
		full[i].Str = strings.Repeat("\x00", 8*MaxDemands)
	}
	if got, err := ParseDemandReply(full, nil); err != nil || len(got) != (MaxDemandReplicas-1)*MaxDemands {
		t.Errorf("at the bounds: %d demands, %v", len(got), err)
	}
	for name, vals := range map[string][]Value{
		"64 replicas":            append(slices.Clone(full), Value{}),
		"1025 demands":           {{Str: strings.Repeat("\x00", 8*MaxDemands+8)}},
		"a partial demand":       {{Str: demandBytes(1)[:7]}},
		"a partial second":       {{Str: demandBytes(1) + "\x00"}},
		"a negative demand":      {{Str: demandBytes(1)}, {Str: demandBytes(1 << 63)}},
		"an integer":             {{Int: 5, IsInt: true}},
		"the non-string marker":  {{Str: "\x00not a string"}},
		"a good one, then a bad": {{Str: demandBytes(3)}, {Str: "x"}},
	} {
		got, err := ParseDemandReply(vals, prior)
		if !errors.Is(err, ErrMalformedReply) || !slices.Equal(got, prior) {
			t.Errorf("%s: %v, %v", name, got, err)
		}
	}
}

// FuzzParseDemandReply: any reply either parses to exactly the demands it
// packs, appended, or is malformed with others as given. data is cut into
// elements by the big-endian uint16s of cuts (each modulo 9000 bytes, the
// rest of data the last element); an odd last byte of cuts adds an
// integer element.
func FuzzParseDemandReply(f *testing.F) {
	f.Add([]byte(demandBytes(1, 2, 3)), []byte{0, 8})
	f.Add([]byte(demandBytes(1<<63, 2)), []byte{0, 16})
	f.Add([]byte("abc"), []byte{0, 1, 7})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		var vals []Value
		rest := data
		for ; len(cuts) >= 2; cuts = cuts[2:] {
			n := min(int(binary.BigEndian.Uint16(cuts))%9000, len(rest))
			vals, rest = append(vals, Value{Str: string(rest[:n])}), rest[n:]
		}
		vals = append(vals, Value{Str: string(rest)})
		if len(cuts) == 1 {
			vals = append(vals, Value{Int: int64(cuts[0]), IsInt: true})
		}
		prior := []int64{42}
		got, err := ParseDemandReply(vals, prior)
		if err != nil {
			if !errors.Is(err, ErrMalformedReply) || !slices.Equal(got, prior) {
				t.Fatalf("refused with %v, others %v", err, got)
			}
			return
		}
		var packed []byte
		for _, d := range got[1:] {
			if d < 0 {
				t.Fatalf("negative demand %d", d)
			}
			packed = binary.BigEndian.AppendUint64(packed, uint64(d))
		}
		if got[0] != 42 || string(packed) != string(data) || len(vals) > MaxDemandReplicas-1 {
			t.Fatalf("parsed %d elements of %d bytes to %v", len(vals), len(data), got)
		}
	})
}
