package audit

import "sync"

// Bounds of the recent denials ring.
const (
	DefaultRecentSize = 100
	maxRecentSize     = 10_000
)

// recent keeps the last denial events offered and kept by sampling (queued
// or not), for an operator's view: a fixed ring, overwritten oldest first.
type recent struct {
	mu   sync.Mutex
	ring []Event
	next int  // where the next event goes
	full bool // the ring has wrapped
}

func newRecent(n int) *recent { return &recent{ring: make([]Event, n)} }

func (r *recent) add(e Event) {
	r.mu.Lock()
	r.ring[r.next] = e
	r.next++
	if r.next == len(r.ring) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// len is how many events the ring holds now (at most its size).
func (r *recent) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return len(r.ring)
	}
	return r.next
}

// last returns up to n events, newest first, as records.
func (r *recent) last(n int) []Record {
	r.mu.Lock()
	size := r.next
	if r.full {
		size = len(r.ring)
	}
	n = min(max(n, 0), size)
	evs := make([]Event, n)
	for i := range n {
		evs[i] = r.ring[(r.next-1-i+len(r.ring))%len(r.ring)]
	}
	r.mu.Unlock()
	out := make([]Record, n)
	for i := range evs {
		out[i] = evs[i].Record()
	}
	return out
}
