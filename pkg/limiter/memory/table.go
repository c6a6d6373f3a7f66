package memory

import (
	"encoding/binary"
	"math/bits"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// table is an open-addressing hash table with linear probing and
// backward-shift deletion, holding keys and entries inline. Beside the slots
// it keeps a parallel array of 32-bit tags (the high half of each key's hash,
// 0 for an empty slot): a probe walks the tags, which are 24 times denser
// than the slots, and reads a slot only when its tag matches, so that a
// lookup of a live subject touches one line of tags and the one slot it
// finds. The subject digest is an HMAC, so its bits are already uniform; a
// multiplicative mix of its words is the hash, and nothing is hashed per
// request. Not safe for concurrent use: the shard lock guards it.
type table struct {
	tags  []uint32 // tagOf(hash) of the slot's key, 0 when empty; same length as slots
	slots []slot   // length 0 or a power of two
	n     int      // used slots
	// shift is 64 - log2(len(slots)): home is the tag's top bits.
	shift uint
	// cursor is where the next bounded expiry scan resumes, so that
	// successive scans of a full shard cover all of it.
	cursor int
	// moves counts growths and removals, the only operations that move a
	// stored key: an index find returned for a key stays its index while
	// moves is unchanged.
	moves uint64
}

// slot holds one key and its entry; it is used exactly when its tag is
// non-zero (and then e.expiresAt is positive: a stored state always expires
// after the time it was written, which is never before the epoch).
type slot struct {
	k key
	e entry
}

const minTableSize = 8

// hashKey mixes the subject digest (whose first eight bytes choose the shard)
// with the revision and algorithm. The policy ID is not hashed: distinct
// policies hardly ever share a digest (it is an HMAC over the policy ID), and
// when they do they only share a probe sequence.
func hashKey(k *key) uint64 {
	d := k.subject[:]
	h := binary.LittleEndian.Uint64(d[8:]) ^ bits.RotateLeft64(binary.LittleEndian.Uint64(d[16:]), 21) ^
		bits.RotateLeft64(binary.LittleEndian.Uint64(d[24:]), 42) ^ binary.LittleEndian.Uint64(d[:8])
	h ^= uint64(k.revision)<<8 | uint64(k.alg)
	return h * 0x9E3779B97F4A7C15
}

// tagOf is the tag stored for a key of hash h: its high 32 bits (the best
// mixed ones) with the lowest bit set, so that it is never 0.
func tagOf(h uint64) uint32 { return uint32(h>>32) | 1 }

// home is the slot a tag starts probing at: its top bits. Every probe, move
// and insert derives the home from the stored tag alone, so a removal never
// reads or rehashes the keys it shifts.
func (t *table) home(tag uint32) int {
	return int(uint64(tag) << 32 >> t.shift)
}

// find returns the index of k and true, or false (with the empty slot that
// ended the probe, only meaningful when the table is not empty).
func (t *table) find(k *key, h uint64) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	tag := tagOf(h)
	mask := len(t.tags) - 1
	for i := t.home(tag); ; i = (i + 1) & mask {
		g := t.tags[i]
		if g == 0 {
			return i, false
		}
		if g != tag {
			continue
		}
		if s := &t.slots[i]; sameSubject(&s.k.subject, &k.subject) &&
			s.k.revision == k.revision && s.k.alg == k.alg && s.k.policy == k.policy {
			return i, true
		}
	}
}

// sameSubject is a == b, as four word compares the compiler inlines (the
// array compare calls memequal).
func sameSubject(a, b *limiter.SubjectDigest) bool {
	le := binary.LittleEndian
	return le.Uint64(a[:8]) == le.Uint64(b[:8]) && le.Uint64(a[8:16]) == le.Uint64(b[8:16]) &&
		le.Uint64(a[16:24]) == le.Uint64(b[16:24]) && le.Uint64(a[24:]) == le.Uint64(b[24:])
}

// used reports whether slot i holds a key.
func (t *table) used(i int) bool { return t.tags[i] != 0 }

// insertAt adds k, which must not be present, growing the table to keep
// it at most three quarters full; hint is the index that find(k, h)
// returned (k not found) with no insert, removal or growth since, or -1
// when there is none.
func (t *table) insertAt(hint int, k *key, h uint64, e entry) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
		hint = -1
	}
	i := hint
	if i < 0 {
		i, _ = t.find(k, h)
	}
	t.tags[i] = tagOf(h)
	t.slots[i] = slot{k: *k, e: e}
	t.n++
}

func (t *table) grow() {
	oldTags, old := t.tags, t.slots
	size := max(minTableSize, 2*len(old))
	t.tags, t.slots = make([]uint32, size), make([]slot, size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	t.cursor = 0
	t.moves++
	mask := size - 1
	for j, tag := range oldTags {
		if tag == 0 {
			continue
		}
		i := t.home(tag)
		for t.tags[i] != 0 {
			i = (i + 1) & mask
		}
		t.tags[i], t.slots[i] = tag, old[j]
	}
}

// remove empties slot i, shifting later members of its probe run back so
// that every key stays reachable from its home without tombstones. Only
// slots at or after i in probe order move.
func (t *table) remove(i int) {
	t.moves++
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.tags[j] != 0; j = (j + 1) & mask {
		h := t.home(t.tags[j])
		// Slot j may move to the hole at i unless its home lies cyclically
		// in (i, j].
		if (j-h)&mask >= (j-i)&mask {
			t.tags[i], t.slots[i] = t.tags[j], t.slots[j]
			i = j
		}
	}
	t.tags[i], t.slots[i] = 0, slot{}
	t.n--
}
