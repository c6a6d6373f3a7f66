package topk

import "math/bits"

// index maps a subject's short key to its counter's place in a sketch's
// heap: an open-addressing table with linear probing, sized once for the
// sketch's k counters (at least twice k slots, so probes stay short). The
// keys are HMAC bits, so a multiplicative hash spreads them whatever bits
// the shard choice fixed. It replaces a Go map on the decision path: no
// hashing of the key, no allocation, one cache line per probe in the common
// case. Not safe for concurrent use.
type index struct {
	slots []slot
	shift uint // 64 - log2(len(slots))
	n     int
}

// slot is one place of the table; pos is the heap position plus one (0:
// empty).
type slot struct {
	key uint64
	pos int32
}

// fibonacci is 2^64 / φ: the multiplier of Fibonacci hashing.
const fibonacci = 0x9E3779B97F4A7C15

func newIndex(k int) index {
	size := 8
	for size < 2*k {
		size *= 2
	}
	return index{slots: make([]slot, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
}

// home is key's first slot.
func (x *index) home(key uint64) int { return int((key * fibonacci) >> x.shift) }

// find returns the slot of key, or the empty slot where it would go.
func (x *index) find(key uint64) (int, bool) {
	mask := len(x.slots) - 1
	for i := x.home(key); ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.pos == 0 {
			return i, false
		}
		if s.key == key {
			return i, true
		}
	}
}

// get returns key's heap position.
func (x *index) get(key uint64) (int, bool) {
	i, ok := x.find(key)
	if !ok {
		return 0, false
	}
	return int(x.slots[i].pos) - 1, true
}

// set maps key to heap position pos. The table never fills: it holds at
// most k keys in at least 2k slots.
func (x *index) set(key uint64, pos int) {
	i, ok := x.find(key)
	if !ok {
		x.slots[i].key = key
		x.n++
	}
	x.slots[i].pos = int32(pos) + 1
}

// del removes key, shifting back the keys probed past its slot so that
// every key stays reachable from its home.
func (x *index) del(key uint64) {
	i, ok := x.find(key)
	if !ok {
		return
	}
	x.n--
	mask := len(x.slots) - 1
	for j := (i + 1) & mask; x.slots[j].pos != 0; j = (j + 1) & mask {
		// The key at j may move to the hole at i when its home is not
		// cyclically within (i, j].
		if h := x.home(x.slots[j].key); (j-h)&mask >= (j-i)&mask {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = slot{}
}

// len returns the number of keys.
func (x *index) len() int { return x.n }

// reset removes every key, keeping the memory.
func (x *index) reset() {
	clear(x.slots)
	x.n = 0
}
