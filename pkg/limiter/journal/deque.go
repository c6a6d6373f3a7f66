package journal

// chunkLen is the number of entries of one chunk of a deque: large enough
// that a chunk's allocation is rare, small enough that a nearly empty
// journal holds little. A chunk is allocated in whole pages: 1024 entries
// of 88 bytes fill eleven 8 KiB pages, none left unused.
const chunkLen = 1024

// deque is a FIFO of entries in fixed-size chunks: pushing at the back and
// dropping from the front are O(1) without ever copying the entries held,
// and the memory held follows the entries held (plus at most two chunks).
// It is not safe for concurrent use.
type deque struct {
	chunks [][]entry // each of chunkLen entries
	head   int       // index of the front entry in chunks[0]
	n      int
}

// len is the number of entries held.
func (d *deque) len() int { return d.n }

// push appends e at the back.
func (d *deque) push(e entry) {
	end := d.head + d.n
	if end == len(d.chunks)*chunkLen {
		d.chunks = append(d.chunks, make([]entry, chunkLen))
	}
	d.chunks[end/chunkLen][end%chunkLen] = e
	d.n++
}

// at returns a pointer to the i-th entry from the front, 0 <= i < len.
func (d *deque) at(i int) *entry {
	p := d.head + i
	return &d.chunks[p/chunkLen][p%chunkLen]
}

// drop removes the n front entries, n <= len, and frees the chunks they
// emptied.
func (d *deque) drop(n int) {
	for i := range n {
		*d.at(i) = entry{} // no policy kept alive
	}
	d.head += n
	d.n -= n
	if free := d.head / chunkLen; free > 0 {
		k := copy(d.chunks, d.chunks[free:])
		clear(d.chunks[k:])
		d.chunks = d.chunks[:k]
		d.head -= free * chunkLen
	}
	if d.n == 0 && len(d.chunks) > 1 {
		// Keep one chunk for the next outage.
		clear(d.chunks[1:])
		d.chunks, d.head = d.chunks[:1], 0
	}
}
