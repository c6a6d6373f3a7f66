package e2e_test

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/envoy-rls/envoy-rls/internal/rlswire"
)

// wireCodec sends a request as the bytes given (wireRequest) and reads the
// response as protobuf: a client that, like Envoy, does not check that
// header bytes copied into descriptor values are UTF-8 (gRPC's own codec
// refuses to marshal such strings).
type wireCodec struct{}

// wireRequest is a request already in protobuf wire format.
type wireRequest []byte

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(wireRequest))}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// encodeRequest writes a request for domain with one descriptor of the
// given entries, field by field, so that keys and values may hold any
// bytes.
func encodeRequest(domain string, entries ...entry) wireRequest {
	es := make([]rlswire.Entry, len(entries))
	for i, e := range entries {
		es[i] = rlswire.Entry(e)
	}
	return rlswire.Request(domain, es...)
}

// callWire sends req as it is and returns the overall code or the error.
func (r *replica) callWire(req wireRequest) (rlsv3.RateLimitResponse_Code, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp := &rlsv3.RateLimitResponse{}
	err := r.conn.Invoke(ctx, rlsPath, req, resp, grpc.ForceCodecV2(wireCodec{}))
	return resp.GetOverallCode(), err
}

// TestInvalidUTF8IsDecided: a descriptor value holding bytes that are not
// UTF-8 (0xff, as an API key header may carry) is a subject like any other:
// limited after its 3 calls, apart from another value, and every call is
// counted in calls_total. A request that is not protobuf at all is still
// refused, and counted too.
func TestInvalidUTF8IsDecided(t *testing.T) {
	r := startReplica(t, "utf8", replicaConfig{Rules: rulesDir(t, `domain: e2e
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 3}
`)})
	okBefore := r.metric(`envoy_rls_calls_total{code="OK"}`)
	key := unique("k") + "\xff\xfe"
	for i := range 5 {
		code, err := r.callWire(encodeRequest(domain, entry{"api_key", key}))
		want := rlsv3.RateLimitResponse_OK
		if i >= 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || code != want {
			t.Fatalf("e2e: call %d with value 0xff: %v %v, want %v", i, code, err, want)
		}
	}
	// The same text with U+FFFD where the bytes were is another subject:
	// values are compared as bytes, not after a lossy conversion.
	other := key[:len(key)-2] + "\uFFFD\uFFFD"
	if code, err := r.callWire(encodeRequest(domain, entry{"api_key", other})); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("e2e: another value: %v %v, want OK", code, err)
	}
	// A key that is not UTF-8 matches no rule: OK, unlimited.
	if code, err := r.callWire(encodeRequest(domain, entry{"api\xff", "v"})); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("e2e: key 0xff: %v %v, want OK", code, err)
	}
	if got, want := r.metric(`envoy_rls_calls_total{code="OK"}`)-okBefore, 7.0; got != want {
		t.Errorf("e2e: calls_total{code=OK} grew by %v, want %v", got, want)
	}

	internalBefore := r.metric(`envoy_rls_calls_total{code="Internal"}`)
	_, err := r.callWire(wireRequest{0x0a, 0x05, 'e'}) // domain longer than the message
	if status.Code(err) != codes.Internal {
		t.Fatalf("e2e: truncated request: %v, want Internal", err)
	}
	if got := r.metric(`envoy_rls_calls_total{code="Internal"}`) - internalBefore; got != 1 {
		t.Errorf("e2e: calls_total{code=Internal} grew by %v after one malformed request, want 1", got)
	}
}
