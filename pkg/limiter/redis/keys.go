package redis

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// StorageKey appends the Redis key of the state of (policy, subject) to buf
// and returns the extended slice. It is the one place that builds the keys
// the store uses (rate-batch-v2.lua's):
//
//	rate:{<tag>}:state:v2:<policy>:<digest>
//
// where <policy> is 16 hex digits of sha256(policyID, revision), which
// ResetPolicy matches, and <digest> the first 16 bytes, in hex, of
// sha256(policyID, revision, algorithm, subject). The key carries no raw
// subject value: the subject is already an HMAC digest and the policy ID is
// a configured, charset-limited name hashed into the digests. The Redis
// Cluster hash tag is tag (16 hex digits) or, when tag is zero, the first 8
// bytes of the subject digest, so that different subjects spread across
// slots while requests given one tag (pkg/descriptors derives it from an
// HMAC of a `colocate` entry, never from a raw value) share a slot. A new
// revision, algorithm or tag yields a new key; the old state expires by its
// TTL. The keys of the previous layout (StorageKeyV1) are other keys: a
// store of one layout never reads the other's (docs/redis.md).
func StorageKey(buf []byte, p *limiter.Policy, subject limiter.SubjectDigest, tag limiter.Tag) []byte {
	return appendKey(buf, ":state:v2:", p, subject, tag)
}

// DemandKey appends the Redis key of the RLQS demands of (policy, subject)
// to buf and returns the extended slice: the hash demand-v1.lua keeps,
// named as StorageKey names the state, in the same hash tag (so in the
// state's slot on a Cluster), with demand:v1 for state:v2:
//
//	rate:{<tag>}:demand:v1:<policy>:<digest>
//
// A policy reset's scan (PolicyKeys) does not match it: a demand hash
// expires alone, a few ticks after its replicas stop writing it.
func DemandKey(buf []byte, p *limiter.Policy, subject limiter.SubjectDigest, tag limiter.Tag) []byte {
	return appendKey(buf, ":demand:v1:", p, subject, tag)
}

// appendKey appends "rate:{<tag>}<kind><policy>:<digest>" to buf, the
// parts as StorageKey describes them.
func appendKey(buf []byte, kind string, p *limiter.Policy, subject limiter.SubjectDigest, tag limiter.Tag) []byte {
	d := stateDigest(p, subject)
	buf = appendTag(buf, subject, tag)
	buf = append(buf, kind...)
	pd := policyDigest(p.ID(), p.Revision())
	buf = hex.AppendEncode(buf, pd[:])
	buf = append(buf, ':')
	return hex.AppendEncode(buf, d[:16])
}

// PolicyKeys is the SCAN MATCH pattern of every key StorageKey builds for
// policyID at revision (every subject and tag).
func PolicyKeys(policyID string, revision uint32) string {
	d := policyDigest(policyID, revision)
	return "rate:{*}:state:v2:" + hex.EncodeToString(d[:]) + ":*"
}

// appendTag appends "rate:{<tag>}" to buf: tag, or when it is zero the
// first 8 bytes of the subject digest, in hex.
func appendTag(buf []byte, subject limiter.SubjectDigest, tag limiter.Tag) []byte {
	buf = append(buf, "rate:{"...)
	if tag == (limiter.Tag{}) {
		copy(tag[:], subject[:8])
	}
	buf = hex.AppendEncode(buf, tag[:])
	return append(buf, '}')
}

// stateDigest is sha256(policyID, revision, algorithm, subject), the fields
// length-prefixed where their length varies, so that no two inputs share
// an encoding. The input is built on the stack and hashed in one call: no
// hasher to allocate or pool.
func stateDigest(p *limiter.Policy, subject limiter.SubjectDigest) [sha256.Size]byte {
	var in [4 + limiter.MaxPolicyIDLength + 4 + 1 + len(limiter.SubjectDigest{})]byte
	id := p.ID()
	binary.BigEndian.PutUint32(in[0:], uint32(len(id)))
	n := 4 + copy(in[4:4+limiter.MaxPolicyIDLength], id)
	binary.BigEndian.PutUint32(in[n:], p.Revision())
	n += 4
	in[n] = byte(p.Algorithm())
	n++
	n += copy(in[n:], subject[:])
	return sha256.Sum256(in[:n])
}

// policyDigest is the policy part of a StorageKey: the first 8 bytes of
// sha256("policy", policyID, revision), the ID length-prefixed.
func policyDigest(policyID string, revision uint32) [8]byte {
	var in [6 + 4 + limiter.MaxPolicyIDLength + 4]byte
	n := copy(in[:], "policy")
	binary.BigEndian.PutUint32(in[n:], uint32(len(policyID)))
	n += 4
	n += copy(in[n:n+limiter.MaxPolicyIDLength], policyID)
	binary.BigEndian.PutUint32(in[n:], revision)
	d := sha256.Sum256(in[:n+4])
	return [8]byte(d[:8])
}

// requestKey appends the Redis key of r's state to buf (StorageKey).
func requestKey(buf []byte, r *limiter.Request) []byte {
	return StorageKey(buf, r.Policy, r.Subject, r.Tag)
}

// keyLayout is the layout of a key's name: which of this package's key
// builders can have made it.
type keyLayout uint8

const (
	// layoutNone: no builder of this package makes such a name.
	layoutNone keyLayout = iota
	// layoutV2: StorageKey's.
	layoutV2
	// layoutV1: StorageKeyV1's.
	layoutV1
)

// stateKeyLayout returns the layout of key's name and, for StorageKey's,
// its <policy> part. A name is of a layout only when it is exactly that
// layout: its constant parts, and lowercase hex digits of the right length
// where a builder writes a digest.
func stateKeyLayout(key string) (keyLayout, string) {
	rest, ok := strings.CutPrefix(key, "rate:{")
	if !ok || len(rest) < 2*len(limiter.Tag{})+1 || !isHex(rest[:2*len(limiter.Tag{})]) {
		return layoutNone, ""
	}
	rest, ok = strings.CutPrefix(rest[2*len(limiter.Tag{}):], "}:state:")
	if !ok {
		return layoutNone, ""
	}
	if v2, ok := strings.CutPrefix(rest, "v2:"); ok {
		const p, d = 2 * 8, 2 * 16 // policyDigest's bytes, StorageKey's digest bytes
		if len(v2) == p+1+d && v2[p] == ':' && isHex(v2[:p]) && isHex(v2[p+1:]) {
			return layoutV2, v2[:p]
		}
		return layoutNone, ""
	}
	if len(rest) == 2*sha256.Size && isHex(rest) {
		return layoutV1, ""
	}
	return layoutNone, ""
}

// isHex reports whether s is lowercase hex digits only, as hex.Encode
// writes them.
func isHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
