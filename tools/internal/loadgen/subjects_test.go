package loadgen

import (
	"errors"
	"slices"
	"testing"
)

func draw(t *testing.T, d Dist, n, draws int, seed, stream uint64) []int {
	t.Helper()
	p, err := NewPicker(d, n, seed, stream)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, n)
	for range draws {
		v := p.Next()
		if v < 0 || v >= n {
			t.Fatalf("%s: draw %d outside [0, %d)", d, v, n)
		}
		counts[v]++
	}
	return counts
}

func TestZipfSkewVersusUniform(t *testing.T) {
	const n, draws = 10_000, 200_000
	top := func(counts []int, k int) float64 {
		c := slices.Clone(counts)
		slices.Sort(c)
		slices.Reverse(c)
		s := 0
		for _, v := range c[:k] {
			s += v
		}
		return float64(s) / draws
	}
	u := draw(t, DistUniform, n, draws, 1, 0)
	z := draw(t, DistZipf, n, draws, 1, 0)
	// Uniform: the top 1 % of subjects get ≈ 1 % of the draws (a little
	// more from sampling noise). Zipf s=1.1: the top 1 % get well over half.
	if got := top(u, n/100); got > 0.03 {
		t.Errorf("uniform: top 1%% of subjects got %.3f of draws, want < 0.03", got)
	}
	if got := top(z, n/100); got < 0.5 {
		t.Errorf("zipf: top 1%% of subjects got %.3f of draws, want > 0.5", got)
	}
	if z[0] <= z[1] || z[1] <= z[10] || z[10] <= z[1000] {
		t.Errorf("zipf counts not decreasing with rank: %d %d %d %d", z[0], z[1], z[10], z[1000])
	}
	if hit := slices.IndexFunc(u, func(c int) bool { return c == 0 }); hit >= 0 {
		t.Errorf("uniform: subject %d never drawn in %d draws", hit, draws)
	}
}

func TestPickerDeterministicPerSeedAndStream(t *testing.T) {
	for _, d := range []Dist{DistUniform, DistZipf} {
		a := draw(t, d, 1000, 5000, 42, 3)
		b := draw(t, d, 1000, 5000, 42, 3)
		c := draw(t, d, 1000, 5000, 42, 4)
		if !slices.Equal(a, b) {
			t.Errorf("%s: same seed and stream gave different draws", d)
		}
		if slices.Equal(a, c) {
			t.Errorf("%s: different streams gave identical draws", d)
		}
	}
}

func TestPickerValidation(t *testing.T) {
	if _, err := NewPicker(DistUniform, 0, 1, 0); err == nil {
		t.Error("0 subjects: want error")
	}
	if _, err := ParseDist("pareto"); !errors.Is(err, ErrUnknownDist) {
		t.Errorf("ParseDist(pareto) = %v, want ErrUnknownDist", err)
	}
	if c := draw(t, DistZipf, 1, 10, 1, 0); c[0] != 10 {
		t.Errorf("zipf over one subject: %v", c)
	}
}
