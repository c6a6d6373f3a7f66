package topk

import (
	"math/rand/v2"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestIndexAgreesWithMap: random sets, deletions and lookups on a full
// and churning table answer as a Go map does.
func TestIndexAgreesWithMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, k := range []int{1, 3, 32, 1024} {
		x := newIndex(k)
		want := map[uint64]int{}
		keys := make([]uint64, 0, k)
		for step := range 20_000 {
			switch op := rng.IntN(3); {
			case op == 0 && len(keys) < k:
				// Keys that share their low bits, as a shard's do.
				key := rng.Uint64()&^3 | 1
				pos := rng.IntN(k)
				x.set(key, pos)
				if _, ok := want[key]; !ok {
					keys = append(keys, key)
				}
				want[key] = pos
			case op == 1 && len(keys) > 0:
				j := rng.IntN(len(keys))
				x.del(keys[j])
				delete(want, keys[j])
				keys[j] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
			default:
				if len(keys) > 0 {
					key := keys[rng.IntN(len(keys))]
					if pos, ok := x.get(key); !ok || pos != want[key] {
						t.Fatalf("k=%d step %d: get(%x) = %d, %v; want %d, true", k, step, key, pos, ok, want[key])
					}
				}
				if _, ok := x.get(rng.Uint64() | 2); ok {
					t.Fatalf("k=%d step %d: an absent key was found", k, step)
				}
			}
			if x.len() != len(want) {
				t.Fatalf("k=%d step %d: %d keys, want %d", k, step, x.len(), len(want))
			}
		}
		for key, pos := range want {
			if got, ok := x.get(key); !ok || got != pos {
				t.Fatalf("k=%d: get(%x) = %d, %v at the end; want %d, true", k, key, got, ok, pos)
			}
		}
		x.reset()
		if x.len() != 0 {
			t.Fatalf("k=%d: %d keys after reset", k, x.len())
		}
	}
}

// swapSketch is the space-saving sketch written the textbook way (a Go
// map, sift by swapping): the sketch must keep exactly its counters, in
// the same heap order, so that every report is the same.
type swapSketch struct {
	k     int
	heap  []counter
	index map[uint64]int
}

func (s *swapSketch) add(subject limiter.SubjectDigest, w int64, denied bool) {
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

func (s *swapSketch) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.index[short(&s.heap[i].subject)] = i
	s.index[short(&s.heap[j].subject)] = j
}

func (s *swapSketch) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].count <= s.heap[i].count {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *swapSketch) down(i int) {
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

// TestSketchMatchesSwapSketch: uniform and skewed streams with weights
// and denials leave the sketch's heap identical, counter by counter and
// place by place, to the textbook sketch's.
func TestSketchMatchesSwapSketch(t *testing.T) {
	subs := subjects(5000)
	for _, k := range []int{1, 2, 7, 32} {
		for _, skew := range []bool{false, true} {
			rng := rand.New(rand.NewPCG(uint64(k), 7))
			z := rand.NewZipf(rng, 1.2, 1, uint64(len(subs)-1))
			got := newSpaceSaving(k)
			want := swapSketch{k: k, heap: make([]counter, 0, k), index: map[uint64]int{}}
			for step := range 50_000 {
				i := rng.IntN(len(subs))
				if skew {
					i = int(z.Uint64())
				}
				w, denied := int64(1+rng.IntN(3)), rng.IntN(5) == 0
				got.add(&subs[i], w, denied)
				want.add(subs[i], w, denied)
				if step%997 != 0 {
					continue
				}
				if len(got.heap) != len(want.heap) {
					t.Fatalf("k=%d skew=%v step %d: %d counters, want %d", k, skew, step, len(got.heap), len(want.heap))
				}
				for j := range want.heap {
					if got.heap[j] != want.heap[j] {
						t.Fatalf("k=%d skew=%v step %d: counter %d is %+v, want %+v", k, skew, step, j, got.heap[j], want.heap[j])
					}
					if pos, ok := got.index.get(short(&want.heap[j].subject)); !ok || pos != j {
						t.Fatalf("k=%d skew=%v step %d: counter %d indexed at %d, %v", k, skew, step, j, pos, ok)
					}
				}
			}
		}
	}
}
