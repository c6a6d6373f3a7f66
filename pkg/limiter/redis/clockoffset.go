package redis

import (
	"context"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/redis/rueidis"
)

// deadlineMargin is subtracted from a call's deadline, converted to Redis's
// clock, before it is given to rate-batch-v2.lua: 2 ms for the millisecond
// floors of the two clocks (the offset sample and the program's TIME), 1 ms
// for the program's run after its TIME read. A program that reads TIME past
// the converted deadline commits nothing (docs/redis.md).
const deadlineMargin = 3 * time.Millisecond

// offsetWindowMs is the length of a window of offset samples, in ms of the
// local clock: the estimate is the largest sample of the current window and
// of the last one before it that had samples.
const offsetWindowMs = 1000

// maxOffsetMs bounds the clock offset the store trusts (about 24 days, the
// range of the packed sample): beyond it a sample is dropped, and with no
// sample no deadline is sent.
const maxOffsetMs = math.MaxInt32

// clockOffset estimates how far one Redis node's clock (TIME, ms) is ahead
// of this process's. A reply received at local time r carries a TIME read
// before r, so serverNow - r is a lower bound of the offset (up to the
// millisecond floors that DeadlineMargin covers), below it by at least the
// reply's way back. The estimate is the largest (tightest) sample of the
// current window and of the previous window that had samples: a forward
// step of Redis's clock raises it with the next reply; after a backward
// step it stays above the truth until two windows with replies have passed
// (the deadline is then late by at most the step). A lower bound errs on
// the side of refusing: Redis is told a deadline no later than the
// caller's, earlier by the fastest reply's way back.
//
// Each word packs a window (the local ms / offsetWindowMs, plus 1, in the
// high 32 bits; 0 is "no sample") and its largest sample (plus 2^31, in the
// low 32 bits). The zero value has no sample. Safe for concurrent use.
type clockOffset struct {
	cur, prev atomic.Int64
}

func packOffset(window uint64, sample int64) int64 {
	return int64(window<<32 | uint64(uint32(sample+maxOffsetMs+1)))
}

func unpackOffset(w int64) (window uint64, sample int64) {
	return uint64(w) >> 32, int64(uint32(w)) - maxOffsetMs - 1
}

// sample records a reply whose program read serverNowMs, received at local
// ms localMs.
func (c *clockOffset) sample(localMs, serverNowMs int64) {
	d := serverNowMs - localMs
	if localMs < 0 || d < -maxOffsetMs || d > maxOffsetMs {
		return
	}
	window := uint64(localMs/offsetWindowMs) + 1
	if window >= 1<<32 {
		return
	}
	packed := packOffset(window, d)
	for {
		old := c.cur.Load()
		w, s := unpackOffset(old)
		switch {
		case w == window:
			if s >= d || c.cur.CompareAndSwap(old, packed) {
				return
			}
		case w < window:
			if c.cur.CompareAndSwap(old, packed) {
				if old != 0 {
					c.prev.Store(old)
				}
				return
			}
		default: // a later window has begun: this sample is late
			return
		}
	}
}

// estimate returns the offset estimate in ms; ok is false before the first
// sample.
func (c *clockOffset) estimate() (offsetMs int64, ok bool) {
	cur := c.cur.Load()
	if cur == 0 {
		return 0, false
	}
	_, d := unpackOffset(cur)
	if prev := c.prev.Load(); prev != 0 {
		_, p := unpackOffset(prev)
		d = max(d, p)
	}
	return d, true
}

// redisDeadline converts a local deadline (ms) to the deadline given to the
// program: deadline + offset - DeadlineMargin, at least 1 (a deadline
// already past) and at most 2^53-1. ok is false before the first sample:
// no deadline is sent then.
func (c *clockOffset) redisDeadline(deadlineMs int64) (ms int64, ok bool) {
	off, ok := c.estimate()
	if !ok {
		return 0, false
	}
	ms = deadlineMs + off - deadlineMargin.Milliseconds()
	return min(max(ms, 1), limiter.MaxSafeInteger), true
}

// localClock reads this process's clock in ms as the offsets use it: the
// wall clock at base, advanced by the monotonic clock, so that a step of
// the local wall clock does not move deadlines or samples.
type localClock struct {
	base   time.Time
	baseMs int64
}

func newLocalClock(now time.Time) localClock {
	return localClock{base: now, baseMs: now.UnixMilli()}
}

// ms converts t (a time.Now reading, or a deadline derived from one) to
// local ms, floored.
func (l localClock) ms(t time.Time) int64 {
	d := t.Sub(l.base)
	ms := d.Milliseconds()
	if d < 0 && d%time.Millisecond != 0 {
		ms-- // floor, not toward zero
	}
	return l.baseMs + ms
}

// seedOffsets reads TIME once from every node, so that the first program
// calls already carry their deadline. Every estimate is seeded with the
// smallest sample: a lower bound of each node's offset, which a slot's own
// replies then raise to its node's. On any failure nothing is seeded: the
// calls then carry no deadline until their first program reply gives a
// sample.
func (s *Store) seedOffsets(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nodes := s.client.Nodes()
	if len(nodes) == 0 {
		return
	}
	least, first := int64(0), true
	for _, n := range nodes {
		local, server, ok := s.readTime(ctx, n)
		if !ok {
			return
		}
		if d := server - local; first || d < least {
			least, first = d, false
		}
	}
	now := s.local.ms(time.Now())
	for i := range s.offsets {
		s.offsets[i].sample(now, now+least)
	}
}

// readTime reads one node's TIME in ms, and the local ms (localClock) at
// which the reply was received.
func (s *Store) readTime(ctx context.Context, c rueidis.Client) (localMs, serverMs int64, ok bool) {
	a, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	recv := time.Now()
	if err != nil || len(a) != 2 {
		return 0, 0, false
	}
	sec, err1 := strconv.ParseInt(a[0], 10, 64)
	usec, err2 := strconv.ParseInt(a[1], 10, 64)
	if err1 != nil || err2 != nil || sec < 0 || usec < 0 || usec >= 1e6 || sec > limiter.MaxSafeInteger/1000-1 {
		return 0, 0, false
	}
	return s.local.ms(recv), sec*1000 + usec/1000, true
}
