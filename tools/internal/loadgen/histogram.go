package loadgen

import (
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The latency histogram records nanoseconds with two significant digits:
// values below 256 ns are counted exactly, and above that a bucket's width
// is at most 1/histResolution of its lower bound. Values above histMax are
// counted as histMax (Min, Max and Mean stay exact).
const (
	histSignificantDigits = 2
	histResolution        = 128 // worst-case relative bucket width is 1/histResolution
	histMax               = int64(time.Hour)
)

// Histogram is a latency histogram: an HdrHistogram of nanoseconds, plus
// the exact minimum, maximum and sum. The zero value is an empty histogram
// ready for use. It is not safe for concurrent use; give each goroutine its
// own and Merge them.
type Histogram struct {
	hdr   *hdrhistogram.Histogram // nil until the first observation
	total uint64
	sum   float64 // nanoseconds
	min   uint64
	max   uint64
}

func newHDR() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, histMax, histSignificantDigits)
}

// Record adds one observation. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	if h.hdr == nil {
		h.hdr = newHDR()
	}
	// In range by construction: RecordValue cannot fail.
	_ = h.hdr.RecordValue(int64(min(v, uint64(histMax))))
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.total++
	h.sum += float64(v)
}

// Merge adds every observation of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	if h.hdr == nil {
		h.hdr = newHDR()
	}
	h.hdr.Merge(o.hdr) // same geometry: nothing is dropped
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.total += o.total
	h.sum += o.sum
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.total }

// Max returns the largest observation, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min returns the smallest observation, exactly.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean returns the arithmetic mean of the observations, exactly.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.total)))
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) as HdrHistogram defines it:
// the value at rank q·count rounded to the nearest integer (at least 1),
// reported as the upper edge of its bucket, clamped to [Min, Max]. So it
// never under-reports the value at that rank and over-reports it by less
// than 1/histResolution. It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	v := uint64(h.hdr.ValueAtQuantile(q * 100))
	return time.Duration(min(max(v, h.min), h.max))
}
