package rls

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/rlswire"
)

// validRequests are well-formed requests with valid UTF-8, covering every
// field DecodeRequest reads.
func validRequests() []*rlsv3.RateLimitRequest {
	override := desc("user", "alice")
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{
		RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(3),
	}
	negative := withHits(desc("k", "v"), 4)
	negative.IsNegativeHits = true
	return []*rlsv3.RateLimitRequest{
		{},
		request("envoy", desc("remote_address", "10.1.2.3")),
		request("bench", desc("tenant", "acme", "route", "/api"), desc("k", ""), desc("", "")),
		{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{override, negative, {}}, HitsAddend: 9},
		request("üñí", desc("ключ", "値")),
	}
}

// rawRequest is the wire format of a request with one descriptor of one
// entry, written field by field so that the strings may hold any bytes.
func rawRequest(domain, key, value string) []byte {
	return rlswire.Request(domain, rlswire.Entry{Key: key, Value: value})
}

// extraFields appends fields proto.Unmarshal must keep or merge: an unknown
// field, a known field with the wrong wire type, a repeated scalar and a
// second hits_addend.
func extraFields(b []byte) []byte {
	b = protowire.AppendTag(b, 99, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 0xdeadbeef)
	b = protowire.AppendTag(b, 1, protowire.VarintType) // domain as a varint: unknown
	b = protowire.AppendVarint(b, 5)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<33+2) // truncated to uint32
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 8)
	return b
}

// TestDecodeRequestMatchesProtoUnmarshal: on well-formed input with valid
// UTF-8, DecodeRequest gives what proto.Unmarshal gives, unknown fields
// included.
func TestDecodeRequestMatchesProtoUnmarshal(t *testing.T) {
	var inputs [][]byte
	for _, r := range validRequests() {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b, extraFields(append([]byte(nil), b...)))
	}
	// A descriptor whose limit and hits_addend come twice (merged).
	d1, _ := proto.Marshal(&rlv3.RateLimitDescriptor{Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}, HitsAddend: wrapperspb.UInt64(2)})
	d2, _ := proto.Marshal(&rlv3.RateLimitDescriptor{Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{Unit: typev3.RateLimitUnit_HOUR}})
	var twice []byte
	twice = protowire.AppendTag(twice, 2, protowire.BytesType)
	twice = protowire.AppendBytes(twice, append(d1, d2...))
	inputs = append(inputs, twice)

	for i, b := range inputs {
		want := &rlsv3.RateLimitRequest{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("input %d: proto.Unmarshal: %v", i, err)
		}
		got := &rlsv3.RateLimitRequest{}
		if err := decodeRequest(b, got); err != nil {
			t.Fatalf("input %d: DecodeRequest: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("input %d: DecodeRequest = %v, proto.Unmarshal = %v", i, got, want)
		}
	}
}

// TestDecodeRequestTakesStringsAsBytes: strings that are not UTF-8, which
// proto.Unmarshal refuses, are read as the bytes sent.
func TestDecodeRequestTakesStringsAsBytes(t *testing.T) {
	for _, tc := range []struct{ name, domain, key, value string }{
		{"value 0xff", "envoy", "api_key", "k\xffey"},
		{"key latin-1", "envoy", "caf\xe9", "v"},
		{"domain truncated sequence", "env\xe2\x82", "k", "v"},
		{"surrogate half", "envoy", "k", "\xed\xa0\x80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := rawRequest(tc.domain, tc.key, tc.value)
			if err := proto.Unmarshal(b, &rlsv3.RateLimitRequest{}); err == nil {
				t.Fatalf("proto.Unmarshal accepted the input: the test no longer covers invalid UTF-8")
			}
			got := &rlsv3.RateLimitRequest{}
			if err := decodeRequest(b, got); err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			e := got.GetDescriptors()[0].GetEntries()[0]
			if got.Domain != tc.domain || e.Key != tc.key || e.Value != tc.value {
				t.Errorf("got domain %q entry (%q, %q), want %q (%q, %q)", got.Domain, e.Key, e.Value, tc.domain, tc.key, tc.value)
			}
		})
	}
}

// TestDecodeRequestRefusesMalformedInput: wire data that is not protobuf is
// still an error.
func TestDecodeRequestRefusesMalformedInput(t *testing.T) {
	good := rawRequest("d", "k", "v")
	for name, b := range map[string][]byte{
		"truncated":         good[:len(good)-1],
		"length past end":   {0x0a, 0x05, 'a'},
		"field number zero": {0x00, 0x01},
		"bad entry":         {0x12, 0x03, 0x0a, 0x05, 'a'},
		"end group":         {0x0c},
		"bad limit":         {0x12, 0x04, 0x12, 0x02, 0x08, 0x80},
	} {
		if err := decodeRequest(b, &rlsv3.RateLimitRequest{}); err == nil {
			t.Errorf("%s: DecodeRequest accepted % x", name, b)
		}
	}
}

// TestCodecUnmarshal: the codec reads valid requests as gRPC's codec does,
// requests with invalid UTF-8 as bytes, and leaves other messages to gRPC's
// codec (which still refuses invalid UTF-8 in them).
func TestCodecUnmarshal(t *testing.T) {
	var c Codec
	if c.Name() != "proto" {
		t.Fatalf("Name() = %q, want proto", c.Name())
	}
	in := request("envoy", desc("user", "alice"))
	out, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got := &rlsv3.RateLimitRequest{}
	if err := c.Unmarshal(out, got); err != nil || !proto.Equal(got, in) {
		t.Fatalf("round trip: %v, %v; want %v", got, err, in)
	}

	raw := rawRequest("envoy", "api_key", "\xff")
	got = &rlsv3.RateLimitRequest{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, got); err != nil {
		t.Fatalf("invalid UTF-8 request: %v", err)
	}
	if v := got.Descriptors[0].Entries[0].Value; v != "\xff" {
		t.Errorf("value = %q, want \\xff", v)
	}

	// The same bytes read as another message with string fields (an entry
	// whose key is field 1) are refused as before.
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.BytesType)
	e = protowire.AppendString(e, "\xff")
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(e)}, &rlv3.RateLimitDescriptor_Entry{}); err == nil {
		t.Errorf("an Entry message with invalid UTF-8 was accepted: only RateLimitRequest is read as bytes")
	}
}

// FuzzDecodeRequest: DecodeRequest never panics; where proto.Unmarshal
// accepts the input, DecodeRequest gives the same message; where only
// DecodeRequest accepts it, some string it read is not valid UTF-8.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range validRequests() {
		b, _ := proto.Marshal(r)
		f.Add(b)
		f.Add(extraFields(b))
	}
	f.Add(rawRequest("envoy", "api_key", "k\xffey"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := &rlsv3.RateLimitRequest{}
		err := decodeRequest(b, got)
		want := &rlsv3.RateLimitRequest{}
		perr := proto.Unmarshal(b, want)
		switch {
		case perr == nil && err != nil:
			t.Fatalf("proto.Unmarshal accepts % x, DecodeRequest: %v", b, err)
		case perr == nil && !proto.Equal(got, want):
			t.Fatalf("% x: DecodeRequest = %v, proto.Unmarshal = %v", b, got, want)
		case perr != nil && err == nil && !strings.Contains(perr.Error(), "invalid UTF-8"):
			t.Fatalf("% x: DecodeRequest accepts what proto.Unmarshal refuses for another reason than UTF-8: %v", b, perr)
		}
	})
}

// The service decides requests whose strings are not UTF-8, and its
// answers still marshal: a value with 0xff is a subject limited like any
// other, a key with 0xff matches no rule, and a limit override keyed by
// such a key is evaluated.
func TestServiceDecidesBytes(t *testing.T) {
	e := newRealEnv(t)
	ctx := context.Background()
	ask := func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := e.srv.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("the answer does not marshal: %v", err)
		}
		return resp
	}
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} { // per-user: 3 a minute
		if got := code(ask(request("rls", desc("user", "al\xffce")))); got != want {
			t.Fatalf("call %d for user al\\xffce: %s, want %s", i, got, want)
		}
	}
	if got := code(ask(request("rls", desc("user", "al\uFFFDce")))); got != "OK" {
		t.Errorf("user al\\uFFFDce: %s, want OK (another subject)", got)
	}
	if got := code(ask(request("rls", desc("us\xffer", "x")))); got != "OK" {
		t.Errorf("key us\\xffer: %s, want OK (no rule)", got)
	}
	override := desc("us\xffer", "x")
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	for i, want := range []string{"OK", "OVER_LIMIT"} {
		if got := code(ask(request("rls", override))); got != want {
			t.Fatalf("override call %d: %s, want %s", i, got, want)
		}
	}
}
