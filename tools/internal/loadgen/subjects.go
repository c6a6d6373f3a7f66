package loadgen

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// Dist names a subject distribution.
type Dist string

// The supported subject distributions.
const (
	DistUniform Dist = "uniform"
	DistZipf    Dist = "zipf"
)

// ZipfS is the exponent of the zipf distribution (s > 1; larger is more
// skewed). Subject 0 is the most frequent.
const ZipfS = 1.1

// ErrUnknownDist is returned for a distribution name that is not supported.
var ErrUnknownDist = errors.New("loadgen: unknown distribution")

// ParseDist parses "uniform" or "zipf".
func ParseDist(s string) (Dist, error) {
	switch Dist(s) {
	case DistUniform, DistZipf:
		return Dist(s), nil
	}
	return "", fmt.Errorf("%w %q (want uniform or zipf)", ErrUnknownDist, s)
}

// Picker draws subject numbers in [0, n). It is not safe for concurrent use.
type Picker interface {
	Next() int
}

// NewPicker returns a deterministic picker over n subjects: the same (dist,
// n, seed, stream) always yields the same sequence. Give each worker its own
// stream number so workers draw independent sequences.
func NewPicker(d Dist, n int, seed, stream uint64) (Picker, error) {
	if n < 1 {
		return nil, fmt.Errorf("loadgen: subjects must be ≥ 1, got %d", n)
	}
	r := rand.New(rand.NewPCG(seed, stream))
	switch d {
	case DistUniform:
		return uniformPicker{r: r, n: n}, nil
	case DistZipf:
		if n == 1 {
			return uniformPicker{r: r, n: 1}, nil
		}
		return zipfPicker{z: rand.NewZipf(r, ZipfS, 1, uint64(n-1))}, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownDist, d)
}

type uniformPicker struct {
	r *rand.Rand
	n int
}

func (p uniformPicker) Next() int { return p.r.IntN(p.n) }

type zipfPicker struct{ z *rand.Zipf }

func (p zipfPicker) Next() int { return int(p.z.Uint64()) }
