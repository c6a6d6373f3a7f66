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
	var d [32]byte
	h := sha256.New()
	var n [4]byte
	// Length-prefixed fields: no two inputs share an encoding.
	binary.BigEndian.PutUint32(n[:], uint32(len(p.spec.ID)))
	h.Write(n[:])
	h.Write([]byte(p.spec.ID))
	binary.BigEndian.PutUint32(n[:], p.spec.Revision)
	h.Write(n[:])
	h.Write([]byte{byte(p.spec.Algorithm)})
	h.Write(subject[:])
	h.Sum(d[:0])
	buf = append(buf, "rate:{"...)
	if tag == (Tag{}) {
		copy(tag[:], subject[:8])
	}
	buf = hex.AppendEncode(buf, tag[:])
	buf = append(buf, "}:state:"...)
	buf = hex.AppendEncode(buf, d[:])
	return buf
}
