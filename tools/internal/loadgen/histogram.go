package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// Histogram bucketing: values (nanoseconds) below 2*histSub are counted
// exactly; above that each power-of-two range is split into histSub equal
// buckets, so a bucket's width is at most 1/histSub (≈0.8 %) of its lower
// bound. Values above histMax are clamped into the last bucket.
const (
	histSubBits = 7
	histSub     = 1 << histSubBits // buckets per power of two
	histMaxExp  = 40               // largest shift: covers up to ≈ 2^48 ns ≈ 78 h
	histBuckets = 2*histSub + histMaxExp*histSub
)

// Histogram is an HDR-style log-bucketed histogram of durations with a
// relative resolution of 1/128. The zero value is an empty histogram ready
// for use. It is not safe for concurrent use; give each goroutine its own
// and Merge them.
type Histogram struct {
	counts [histBuckets]uint64
	total  uint64
	sum    float64 // nanoseconds
	min    uint64
	max    uint64
}

// bucketOf returns the bucket index of v (nanoseconds).
func bucketOf(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // v>>shift is in [histSub, 2*histSub)
	if shift > histMaxExp {
		return histBuckets - 1
	}
	return 2*histSub + (shift-1)*histSub + int(v>>shift) - histSub
}

// bucketBounds returns the lowest value of bucket i and the bucket's width.
func bucketBounds(i int) (lo, width uint64) {
	if i < 2*histSub {
		return uint64(i), 1
	}
	j := i - 2*histSub
	shift := uint(j/histSub + 1)
	return uint64(histSub+j%histSub) << shift, 1 << shift
}

// Record adds one observation. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[bucketOf(v)]++
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
	for i, c := range o.counts {
		h.counts[i] += c
	}
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

// Quantile returns the q-quantile (0 ≤ q ≤ 1) with the nearest-rank
// definition: the smallest recorded value v such that at least q of the
// observations are ≤ v. The answer is the upper edge of v's bucket, clamped
// to [Min, Max], so it never under-reports and over-reports by at most one
// bucket width (< 0.8 %). It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	if rank < 1 {
		rank = 1
	}
	if rank > h.total {
		rank = h.total
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := bucketBounds(i)
			v := lo + w - 1
			v = min(max(v, h.min), h.max)
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
