package descriptors

import (
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

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
