package redis

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// StorageKey appends the Redis key of the state of (policy, subject) to buf
// and returns the extended slice. It is the one place that builds keys:
//
//	rate:{<tag>}:state:<hex(sha256(policyID, revision, algorithm, subject))>
//
// The key carries no raw subject value: the subject is already an HMAC digest
// and the policy ID is a configured, charset-limited name hashed into the
// digest. The Redis Cluster hash tag is tag (16 hex digits) or, when tag is
// zero, the first 8 bytes of the subject digest, so that different subjects
// spread across slots while requests given one tag (pkg/descriptors derives
// it from an HMAC of a `colocate` entry, never from a raw value) share a slot.
// A new revision, algorithm or tag yields a new key; the old state expires
// by its TTL.
func StorageKey(buf []byte, p *limiter.Policy, subject limiter.SubjectDigest, tag limiter.Tag) []byte {
	// The digest input is built on the stack and hashed in one call: no
	// hasher to allocate or pool. Length-prefixed fields: no two inputs
	// share an encoding. The policy ID is at most MaxPolicyIDLength bytes.
	var in [4 + limiter.MaxPolicyIDLength + 4 + 1 + len(limiter.SubjectDigest{})]byte
	id := p.ID()
	binary.BigEndian.PutUint32(in[0:], uint32(len(id)))
	n := 4 + copy(in[4:4+limiter.MaxPolicyIDLength], id)
	binary.BigEndian.PutUint32(in[n:], p.Revision())
	n += 4
	in[n] = byte(p.Algorithm())
	n++
	n += copy(in[n:], subject[:])
	d := sha256.Sum256(in[:n])
	buf = append(buf, "rate:{"...)
	if tag == (limiter.Tag{}) {
		copy(tag[:], subject[:8])
	}
	buf = hex.AppendEncode(buf, tag[:])
	buf = append(buf, "}:state:"...)
	buf = hex.AppendEncode(buf, d[:])
	return buf
}

// requestKey appends the Redis key of r's state to buf (StorageKey).
func requestKey(buf []byte, r *limiter.Request) []byte {
	return StorageKey(buf, r.Policy, r.Subject, r.Tag)
}
