package limiter

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// StorageKey appends the physical store key of (policy, subject) to buf and
// returns the extended slice. It is the one place that builds keys:
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
func StorageKey(buf []byte, p *Policy, subject SubjectDigest, tag Tag) []byte {
	// The digest input is built on the stack and hashed in one call: no
	// hasher to allocate or pool. Length-prefixed fields: no two inputs
	// share an encoding. The policy ID is at most MaxPolicyIDLength bytes.
	var in [4 + MaxPolicyIDLength + 4 + 1 + len(SubjectDigest{})]byte
	id := p.spec.ID
	binary.BigEndian.PutUint32(in[0:], uint32(len(id)))
	n := 4 + copy(in[4:4+MaxPolicyIDLength], id)
	binary.BigEndian.PutUint32(in[n:], p.spec.Revision)
	n += 4
	in[n] = byte(p.spec.Algorithm)
	n++
	n += copy(in[n:], subject[:])
	d := sha256.Sum256(in[:n])
	buf = append(buf, "rate:{"...)
	if tag == (Tag{}) {
		copy(tag[:], subject[:8])
	}
	buf = hex.AppendEncode(buf, tag[:])
	buf = append(buf, "}:state:"...)
	buf = hex.AppendEncode(buf, d[:])
	return buf
}
