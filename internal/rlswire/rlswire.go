// Package rlswire writes RateLimitRequest messages in protobuf wire format
// field by field, for tests that must send keys and values holding any
// bytes (proto.Marshal refuses strings that are not UTF-8).
package rlswire

import "google.golang.org/protobuf/encoding/protowire"

// Entry is one descriptor entry.
type Entry struct{ Key, Value string }

// Request is the wire format of a request for domain with one descriptor
// of the given entries, in order.
func Request(domain string, entries ...Entry) []byte {
	var d []byte
	for _, e := range entries {
		var eb []byte
		eb = protowire.AppendTag(eb, 1, protowire.BytesType)
		eb = protowire.AppendString(eb, e.Key)
		eb = protowire.AppendTag(eb, 2, protowire.BytesType)
		eb = protowire.AppendString(eb, e.Value)
		d = protowire.AppendTag(d, 1, protowire.BytesType)
		d = protowire.AppendBytes(d, eb)
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, d)
	return b
}
