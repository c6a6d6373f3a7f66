package topk

import (
	"encoding/binary"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// counter is one monitored subject of a space-saving sketch.
type counter struct {
	subject limiter.SubjectDigest
	// count is the subject's estimated weight: at most err above its true
	// weight since the sketch began, never below it.
	count int64
	// err is the weight of the counter this subject took over (0 when it
	// took a free counter).
	err int64
	// denied counts the subject's denials since it entered the sketch (a
	// lower bound).
	denied int64
}

// spaceSaving is the space-saving heavy-hitter sketch (Metwally, Agrawal,
// El Abbadi): k counters; a subject not monitored takes over the counter of
// least weight, inheriting that weight as its error bound. Any subject whose
// weight exceeds total/k is monitored. The counters form a min-heap on
// count, with index mapping a subject to its place in it. Memory is fixed
// once k counters are in use. Not safe for concurrent use.
type spaceSaving struct {
	k     int
	heap  []counter
	index index
}

// short is the index key of a subject: 64 bits of an HMAC output, which
// collide with probability 2^-64 per pair.
func short(s *limiter.SubjectDigest) uint64 {
	return binary.LittleEndian.Uint64(s[:8])
}

func newSpaceSaving(k int) spaceSaving {
	return spaceSaving{k: k, heap: make([]counter, 0, k), index: newIndex(k)}
}

// add adds weight w (> 0) to subject; denied counts one denial.
func (s *spaceSaving) add(subject *limiter.SubjectDigest, w int64, denied bool) {
	var d int64
	if denied {
		d = 1
	}
	key := short(subject)
	if i, ok := s.index.get(key); ok {
		c := s.heap[i]
		c.count += w
		c.denied += d
		s.down(i, c)
		return
	}
	if len(s.heap) < s.k {
		s.heap = append(s.heap, counter{})
		s.up(len(s.heap)-1, counter{subject: *subject, count: w, denied: d})
		return
	}
	lowest := &s.heap[0]
	s.index.del(short(&lowest.subject))
	s.down(0, counter{subject: *subject, count: lowest.count + w, err: lowest.count, denied: d})
}

// reset empties the sketch, keeping its memory.
func (s *spaceSaving) reset() {
	s.heap = s.heap[:0]
	s.index.reset()
}

// place puts c at heap position i and indexes it there.
func (s *spaceSaving) place(i int, c counter) {
	s.heap[i] = c
	s.index.set(short(&c.subject), i)
}

// up places c, whose count is no more than before, at or above position i:
// it moves the parents of larger count down into the hole instead of
// swapping, so each moved counter is written and indexed once.
func (s *spaceSaving) up(i int, c counter) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].count <= c.count {
			break
		}
		s.place(i, s.heap[p])
		i = p
	}
	s.place(i, c)
}

// down places c, whose count is no less than before, at or below position
// i, moving the smaller children up into the hole (the same comparisons,
// and so the same heap, as swapping down).
func (s *spaceSaving) down(i int, c counter) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s.heap[r].count < s.heap[l].count {
			m = r
		}
		if c.count <= s.heap[m].count {
			break
		}
		s.place(i, s.heap[m])
		i = m
	}
	s.place(i, c)
}
