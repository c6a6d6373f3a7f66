package loadgen

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exactQuantile is the quantile of sorted samples as HdrHistogram ranks
// it: the sample at rank q·n rounded to the nearest integer, at least 1.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(float64(len(sorted))*q + 0.5)
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func TestHistogramQuantilesSmallExact(t *testing.T) {
	// Values below 256 ns are counted exactly.
	var h Histogram
	for v := 1; v <= 100; v++ {
		h.Record(time.Duration(v))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.01, 1}, {0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}} {
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 {
		t.Errorf("count/min/max = %d/%v/%v, want 100/1ns/100ns", h.Count(), h.Min(), h.Max())
	}
	if got := h.Mean(); got != 51 { // 50.5 rounds to 51
		t.Errorf("Mean = %v, want 51ns", got)
	}
}

func TestHistogramQuantilesAgainstSortedSamples(t *testing.T) {
	// Log-normal-ish latencies from 20 µs to seconds: every quantile must be
	// ≥ the exact one and within one bucket (1/histResolution) above it.
	r := rand.New(rand.NewPCG(7, 7))
	samples := make([]time.Duration, 200_000)
	var h Histogram
	for i := range samples {
		d := time.Duration(20_000 * (1 + r.ExpFloat64()*r.ExpFloat64()*50))
		samples[i] = d
		h.Record(d)
	}
	slices.Sort(samples)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		want := exactQuantile(samples, q)
		got := h.Quantile(q)
		if got < want || float64(got-want) > float64(want)/histResolution {
			t.Errorf("Quantile(%v) = %v, exact %v: off by more than 1/%d", q, got, want, histResolution)
		}
	}
	if h.Max() != samples[len(samples)-1] || h.Min() != samples[0] {
		t.Errorf("min/max = %v/%v, want %v/%v", h.Min(), h.Max(), samples[0], samples[len(samples)-1])
	}
}

func TestHistogramMergeEqualsRecordingAll(t *testing.T) {
	var a, b, all Histogram
	for i := range 10_000 {
		d := time.Duration(i*i) * time.Nanosecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{}) // merging an empty one changes nothing
	if !m.hdr.Equals(all.hdr) || m.total != all.total || m.sum != all.sum || m.min != all.min || m.max != all.max {
		t.Fatal("merged histogram differs from one that recorded every value")
	}
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if m.Quantile(q) != all.Quantile(q) {
			t.Errorf("Quantile(%v): merged %v, recorded %v", q, m.Quantile(q), all.Quantile(q))
		}
	}
}

func TestHistogramEmptyAndExtremes(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram must report 0")
	}
	h.Record(-time.Second) // clamps to 0
	h.Record(100 * time.Hour)
	if h.Min() != 0 || h.Max() != 100*time.Hour {
		t.Fatalf("min/max = %v/%v", h.Min(), h.Max())
	}
	if got := h.Quantile(1); got > h.Max() {
		t.Fatalf("Quantile(1) = %v above max %v", got, h.Max())
	}
}

func TestHistogramResolutionAcrossMagnitudes(t *testing.T) {
	// Two values per power of ten from 1 µs to 10 min: the quantile that
	// falls on the smaller one is reported within 1/histResolution above it.
	for v := time.Microsecond; v <= 10*time.Minute; v *= 10 {
		for _, x := range []time.Duration{v, v + v/3} {
			var h Histogram
			h.Record(x)
			h.Record(10 * x)
			got := h.Quantile(0.5)
			if got < x || float64(got-x) > float64(x)/histResolution {
				t.Errorf("value %v: Quantile(0.5) = %v, want within 1/%d above", x, got, histResolution)
			}
		}
	}
}
