package rls

import (
	"errors"
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Codec is the gRPC codec of a server that serves this service: gRPC's
// protobuf codec, except that a RateLimitRequest whose string fields
// (domain, entry keys and values) are not valid UTF-8 is still read, its
// strings holding the bytes as sent. Envoy copies header bytes into
// descriptor values as they arrive, and proto3 parsers refuse such strings;
// refusing them would answer the whole call with an error, which Envoy's
// failure_mode_deny: false (its default) turns into "not limited".
//
// Every other message, and every response, goes through gRPC's protobuf
// codec unchanged. Install it on one server with grpc.ForceServerCodecV2;
// it is not registered globally. The zero value is ready to use and safe for
// concurrent use.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// protoCodec is gRPC's own protobuf codec, registered by its package.
func protoCodec() encoding.CodecV2 { return encoding.GetCodecV2(grpcproto.Name) }

// Name is gRPC's protobuf codec name: the content subtype is unchanged.
func (Codec) Name() string { return grpcproto.Name }

// Marshal is gRPC's protobuf marshalling.
func (Codec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec().Marshal(v) }

// Unmarshal is gRPC's protobuf unmarshalling; a RateLimitRequest that it
// refuses is read again by DecodeRequest, which takes strings as bytes.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := protoCodec().Unmarshal(data, v)
	req, ok := v.(*rlsv3.RateLimitRequest)
	if err == nil || !ok {
		return err
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	proto.Reset(req)
	if derr := decodeRequest(buf.ReadOnlyData(), req); derr != nil {
		return derr
	}
	return nil
}

// errDecode is the error of a RateLimitRequest that is not well-formed
// protobuf.
var errDecode = errors.New("rls: request is not a well-formed RateLimitRequest")

// decodeRequest parses the protobuf wire format b into m exactly as
// proto.Unmarshal does (unknown fields kept, repeated occurrences of a
// message field merged, the last occurrence of a scalar winning, a known
// field of the wrong wire type kept as unknown) except for one thing: the
// strings of RateLimitRequest and its descriptor entries are not required to
// be valid UTF-8. Go strings hold any bytes; the matcher and the subject
// digest read them as bytes. m should be empty (proto.Reset).
func decodeRequest(b []byte, m *rlsv3.RateLimitRequest) error {
	return decodeFields(b, m, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (bool, error) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			m.Domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			return true, appendDecoded(&m.Descriptors, v, decodeDescriptor)
		case num == 3 && typ == protowire.VarintType:
			m.HitsAddend = uint32(x)
		default:
			return false, nil
		}
		return true, nil
	})
}

func decodeDescriptor(b []byte, d *rlv3.RateLimitDescriptor) error {
	merge := proto.UnmarshalOptions{Merge: true}
	return decodeFields(b, d, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (bool, error) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return true, appendDecoded(&d.Entries, v, decodeEntry)
		case num == 2 && typ == protowire.BytesType:
			// No string inside: the standard parser, merging as it does.
			if d.Limit == nil {
				d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{}
			}
			return true, merge.Unmarshal(v, d.Limit)
		case num == 3 && typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = &wrapperspb.UInt64Value{}
			}
			return true, merge.Unmarshal(v, d.HitsAddend)
		case num == 4 && typ == protowire.VarintType:
			d.IsNegativeHits = x != 0
		default:
			return false, nil
		}
		return true, nil
	})
}

func decodeEntry(b []byte, e *rlv3.RateLimitDescriptor_Entry) error {
	return decodeFields(b, e, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) (bool, error) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e.Key = string(v)
		case num == 2 && typ == protowire.BytesType:
			e.Value = string(v)
		default:
			return false, nil
		}
		return true, nil
	})
}

// appendDecoded decodes b into a new message with decode and appends it to
// list: a repeated message field.
func appendDecoded[T any](list *[]*T, b []byte, decode func([]byte, *T) error) error {
	m := new(T)
	if err := decode(b, m); err != nil {
		return err
	}
	*list = append(*list, m)
	return nil
}

// decodeFields walks the fields of one message. For each field, known is
// called with its number and type and, for a length-delimited field, its
// bytes (v) or, for a varint, its value (x); known reports whether it took
// the field. Fields it does not take are kept, as they were sent, as m's
// unknown fields.
func decodeFields(b []byte, m proto.Message, known func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (bool, error)) error {
	var unknown []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errDecode, protowire.ParseError(n))
		}
		if !num.IsValid() {
			return fmt.Errorf("%w: field number %d", errDecode, num)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: %v", errDecode, protowire.ParseError(n))
		}
		value := b[:n]
		b = b[n:]
		if typ == protowire.BytesType || typ == protowire.VarintType {
			took, err := known(num, typ, v, x)
			if err != nil {
				return err
			}
			if took {
				continue
			}
		}
		// As proto.Unmarshal keeps them: the tag in its shortest form,
		// then the value as sent.
		unknown = protowire.AppendTag(unknown, num, typ)
		unknown = append(unknown, value...)
	}
	if unknown != nil {
		m.ProtoReflect().SetUnknown(unknown)
	}
	return nil
}
