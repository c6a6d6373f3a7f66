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
	index map[uint64]int
}

// short is the index key of a subject: 64 bits of an HMAC output, which
// collide with probability 2^-64 per pair.
func short(s *limiter.SubjectDigest) uint64 {
	return binary.LittleEndian.Uint64(s[:8])
}

func newSpaceSaving(k int) spaceSaving {
	return spaceSaving{k: k, heap: make([]counter, 0, k), index: make(map[uint64]int, k)}
}

// add adds weight w (> 0) to subject; denied counts one denial.
func (s *spaceSaving) add(subject limiter.SubjectDigest, w int64, denied bool) {
	var d int64
	if denied {
		d = 1
	}
	if i, ok := s.index[short(&subject)]; ok {
		s.heap[i].count += w
		s.heap[i].denied += d
		s.down(i)
		return
	}
	if len(s.heap) < s.k {
		s.heap = append(s.heap, counter{subject: subject, count: w, denied: d})
		i := len(s.heap) - 1
		s.index[short(&subject)] = i
		s.up(i)
		return
	}
	lowest := s.heap[0]
	delete(s.index, short(&lowest.subject))
	s.heap[0] = counter{subject: subject, count: lowest.count + w, err: lowest.count, denied: d}
	s.index[short(&subject)] = 0
	s.down(0)
}

// reset empties the sketch, keeping its memory.
func (s *spaceSaving) reset() {
	s.heap = s.heap[:0]
	clear(s.index)
}

func (s *spaceSaving) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.index[short(&s.heap[i].subject)] = i
	s.index[short(&s.heap[j].subject)] = j
}

func (s *spaceSaving) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].count <= s.heap[i].count {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *spaceSaving) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.heap[r].count < s.heap[l].count {
			m = r
		}
		if s.heap[i].count <= s.heap[m].count {
			return
		}
		s.swap(i, m)
		i = m
	}
}
