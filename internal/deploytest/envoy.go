package deploytest

import (
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

type validator interface{ ValidateAll() error }

// ValidateProto runs the generated (protoc-gen-validate) ValidateAll on m and
// on the message inside every Any reachable from it: the generated
// validators stop at an Any, and Envoy's filter configs all sit in one. The
// Any types must be registered (import their packages).
func ValidateProto(t testing.TB, where string, m proto.Message) {
	t.Helper()
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	var walk func(protoreflect.Message)
	walk = func(rm protoreflect.Message) {
		if a, ok := rm.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				t.Errorf("%s: %s: %v", where, a.GetTypeUrl(), err)
				return
			}
			ValidateProto(t, a.GetTypeUrl(), inner)
			return
		}
		rm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
}

// Descriptors computes the descriptors Envoy's rate-limit filter sends for a
// request with these headers (":path" with its query string, ":authority",
// ...) from the client address, given the rate_limits that apply. Only the
// actions the examples use are modelled (remote_address, generic_key,
// request_headers, header_value_match on :path prefixes); any other fails the
// test, so a new one gets modelled before it is trusted.
func Descriptors(t testing.TB, rateLimits []*routev3.RateLimit, headers map[string]string, client string) [][]descriptors.Entry {
	t.Helper()
	var out [][]descriptors.Entry
	for _, rl := range rateLimits {
		var entries []descriptors.Entry
		ok := true
		for _, a := range rl.GetActions() {
			switch {
			case a.GetRemoteAddress() != nil:
				entries = append(entries, descriptors.Entry{Key: "remote_address", Value: client})
			case a.GetGenericKey() != nil:
				key := a.GetGenericKey().GetDescriptorKey()
				if key == "" {
					key = "generic_key"
				}
				entries = append(entries, descriptors.Entry{Key: key, Value: a.GetGenericKey().GetDescriptorValue()})
			case a.GetRequestHeaders() != nil:
				rh := a.GetRequestHeaders()
				v, present := headers[rh.GetHeaderName()]
				switch {
				case present:
					entries = append(entries, descriptors.Entry{Key: rh.GetDescriptorKey(), Value: v})
				case !rh.GetSkipIfAbsent():
					ok = false // Envoy drops the whole descriptor
				}
			case a.GetHeaderValueMatch() != nil:
				m := a.GetHeaderValueMatch()
				match := true
				for _, h := range m.GetHeaders() {
					if h.GetName() != ":path" || h.GetStringMatch().GetPrefix() == "" {
						t.Fatalf("header_value_match on %v: only :path prefix matches are modelled", h)
					}
					match = match && strings.HasPrefix(headers[":path"], h.GetStringMatch().GetPrefix())
				}
				expect := m.GetExpectMatch() == nil || m.GetExpectMatch().GetValue()
				if match != expect {
					ok = false
					break
				}
				key := m.GetDescriptorKey()
				if key == "" {
					key = "header_match"
				}
				entries = append(entries, descriptors.Entry{Key: key, Value: m.GetDescriptorValue()})
			default:
				t.Fatalf("rate limit action %v is not modelled by this test", a)
			}
			if !ok {
				break
			}
		}
		if ok && len(entries) > 0 {
			out = append(out, entries)
		}
	}
	return out
}
