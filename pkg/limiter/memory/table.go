package memory

import (
	"encoding/binary"
	"math/bits"
)

// table is an open-addressing hash table with linear probing and
// backward-shift deletion, holding keys and entries inline: a lookup of a
// live subject touches one or two adjacent cache lines, where a Go map plus a
// separate entry touches three. The subject digest is an HMAC, so its bits
// are already uniform; a multiplicative mix of its words is the hash, and
// nothing is hashed per request. Not safe for concurrent use: the shard lock
// guards it.
type table struct {
	slots []slot // length 0 or a power of two
	n     int    // used slots
	// cursor is where the next bounded expiry scan resumes, so that
	// successive scans of a full shard cover all of it.
	cursor int
}

// slot is empty when e.expiresAt is 0: a stored state always expires after
// the time it was written, which is never before the epoch.
type slot struct {
	k key
	e entry
}

func (s *slot) used() bool { return s.e.expiresAt != 0 }

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

// home is the slot a hash starts probing at: the high bits of the product.
func (t *table) home(h uint64) int {
	return int(h >> (64 - bits.TrailingZeros(uint(len(t.slots)))))
}

// find returns the index of k and true, or false (with an index only
// meaningful when the table is not empty).
func (t *table) find(k *key, h uint64) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.used() {
			return i, false
		}
		if s.k.subject == k.subject && s.k.revision == k.revision && s.k.alg == k.alg && s.k.policy == k.policy {
			return i, true
		}
	}
}

// insert adds k, which must not be present, growing the table to keep it at
// most three quarters full.
func (t *table) insert(k *key, h uint64, e entry) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	i, _ := t.find(k, h)
	t.slots[i] = slot{k: *k, e: e}
	t.n++
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, max(minTableSize, 2*len(old)))
	t.cursor = 0
	mask := len(t.slots) - 1
	for j := range old {
		if !old[j].used() {
			continue
		}
		i := t.home(hashKey(&old[j].k))
		for t.slots[i].used() {
			i = (i + 1) & mask
		}
		t.slots[i] = old[j]
	}
}

// remove empties slot i, shifting later members of its probe run back so
// that every key stays reachable from its home without tombstones. Only
// slots at or after i in probe order move.
func (t *table) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].used(); j = (j + 1) & mask {
		h := t.home(hashKey(&t.slots[j].k))
		// Slot j may move to the hole at i unless its home lies cyclically
		// in (i, j].
		if (j-h)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}
