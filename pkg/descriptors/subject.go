package descriptors

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Subject encoding (HMAC-SHA256 input), version 1:
//
//	0x01
//	u32 len(policyID) policyID
//	u32 number of entries
//	per entry: u32 len(key) key, tag byte, u32 len(v) v
//
// where the tag is 'v' when v is the request value and 'p' when v is the
// configured wildcard pattern of a share_threshold rule (all matching values
// then share one subject). Every variable field is length-prefixed, so no two
// different inputs share an encoding: ("a","bc") and ("ab","c") differ.
const subjectVersion = 1

// maxPooledBuf caps the scratch buffer kept in the pool.
const maxPooledBuf = 64 << 10

type macState struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// subject computes the HMAC digest for entries matched along path (path may
// be nil: every value is then used as is).
func (s *Snapshot) subject(policyID string, entries []Entry, path []*node) limiter.SubjectDigest {
	st := s.macs.Get().(*macState)
	b := append(st.buf[:0], subjectVersion)
	b = appendField(b, policyID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	for i, e := range entries {
		var n *node
		if path != nil {
			n = path[i]
		}
		b = appendEntry(b, e, n)
	}
	var out limiter.SubjectDigest
	sum := s.sum(st, b)
	copy(out[:], sum[:])
	return out
}

// appendEntry appends one matched entry as the subject and colocation
// encodings both have it: its key, then 'p' and the share_threshold pattern
// of n (a node matched by a pattern with share_threshold), or 'v' and the
// value. n may be nil.
func appendEntry(b []byte, e Entry, n *node) []byte {
	b = appendField(b, e.Key)
	if n != nil && n.share {
		b = append(b, 'p')
		return appendField(b, n.pattern)
	}
	b = append(b, 'v')
	return appendField(b, e.Value)
}

// sum returns the HMAC of b, built in st's buffer, and puts st back in the
// pool (keeping the buffer unless it grew beyond maxPooledBuf).
func (s *Snapshot) sum(st *macState, b []byte) [sha256.Size]byte {
	st.mac.Reset()
	st.mac.Write(b)
	st.mac.Sum(st.sum[:0])
	out := st.sum
	if cap(b) <= maxPooledBuf {
		st.buf = b
	} else {
		st.buf = nil
	}
	s.macs.Put(st)
	return out
}

func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// Colocation tag encoding (HMAC-SHA256 input), version 1:
//
//	0x02 'c'
//	u32 len(key) key, tag byte, u32 len(v) v
//
// with the tag byte and v as in the subject encoding (a share_threshold
// entry uses its pattern). The policy ID is not part of it: every rule that
// colocates on one entry value gets the same tag. The first 8 bytes of the
// digest are the tag; 0x02 keeps it apart from any subject digest.
const tagVersion = 2

// tag computes the colocation hash tag of one matched entry.
func (s *Snapshot) tag(e Entry, n *node) limiter.Tag {
	st := s.macs.Get().(*macState)
	b := append(st.buf[:0], tagVersion, 'c')
	b = appendEntry(b, e, n)
	var out limiter.Tag
	sum := s.sum(st, b)
	copy(out[:], sum[:])
	if out == (limiter.Tag{}) {
		out[7] = 1 // zero means "derive from the subject"
	}
	return out
}

// Configuration digest encoding (HMAC-SHA256 input), version 3:
//
//	0x03 'v' u32 len(key) key u32 len(value) value   a value of a rule path
//	0x03 'i' u32 len(id) id                          a policy ID holding values
//
// 0x03 keeps these apart from subjects and tags. The first 8 bytes, as
// "hmac:" and 16 hex digits, stand for the configured string where it is
// shown without the admin token (DomainsDigested): one string, one digest
// under one secret, and without the secret the string cannot be guessed
// from it.
const configDigestVersion = 3

// configDigest returns the digest of a configured value of key (kind 'v')
// or of a policy ID (kind 'i', key unused).
func (s *Snapshot) configDigest(kind byte, key, value string) string {
	st := s.macs.Get().(*macState)
	b := append(st.buf[:0], configDigestVersion, kind)
	if kind == 'v' {
		b = appendField(b, key)
	}
	b = appendField(b, value)
	sum := s.sum(st, b)
	return "hmac:" + hex.EncodeToString(sum[:8])
}
